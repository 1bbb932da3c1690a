#!/usr/bin/env bash
# native-arm64-check.sh PY WHEEL SHARDS WORK: builds the Python package's Linux
# arm64 wheel on this x86_64 host (SEGPIPE_GOARCH=arm64, the loader library
# cross-compiled with aarch64-linux-gnu-gcc), checks its tag and that its
# library is arm64 code, and runs that library under qemu-user against the
# x86_64 wheel's own: python/native/testdata/streamsum.c, built for each
# machine, reads the same request through the C ABI and the Arrow C stream
# and prints the batch, image and instance counts, a hash of every image
# and mask byte and the resume state, which must be equal.
#
#   PY      a Python with pip
#   WHEEL   the x86_64 wheel built from the same checkout (.ci/run's), or
#           the manylinux one (scripts/build-wheels.sh)
#   SEGPIPE_ARM64_WHEEL  an arm64 wheel to check instead of building one
#           (the manylinux aarch64 wheel of scripts/build-wheels.sh)
#   SHARDS  a shard set (coco-tiny val in CI)
#   WORK    a scratch directory
# Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user-static
# (installed when missing, as root).
set -euo pipefail
if [ $# -ne 4 ]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
py=$1 x86=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") shards=$(cd "$3" && pwd) work=$4
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
if ! command -v aarch64-linux-gnu-gcc >/dev/null || [ ! -d /usr/aarch64-linux-gnu/lib ] || ! command -v qemu-aarch64-static >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static >/dev/null
fi

if [ -n "${SEGPIPE_ARM64_WHEEL:-}" ]; then
  whl=$SEGPIPE_ARM64_WHEEL
else
  echo "building the arm64 wheel"
  rm -rf "$work/dist-arm64"
  (cd "$root" && SEGPIPE_GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
    "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/dist-arm64" ./python)
  whl=$(ls "$work"/dist-arm64/segpipe-*.whl)
fi
case "$whl" in
  *-py3-none-linux_aarch64.whl | *-py3-none-manylinux*_aarch64.whl) echo "wheel: $(basename "$whl")" ;;
  *) echo "arm64 wheel tagged wrongly: $(basename "$whl")" >&2; exit 1 ;;
esac
case "$x86" in
  *-linux_x86_64.whl | *-manylinux*_x86_64.whl) ;;
  *) echo "$x86: want the x86_64 wheel" >&2; exit 1 ;;
esac
for arch in arm64 amd64; do
  d="$work/lib-$arch"
  rm -rf "$d" && mkdir -p "$d"
  w=$whl
  [ "$arch" = amd64 ] && w=$x86
  "$py" - "$w" "$d" <<'PY'
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for name in ("segpipe/_native/libsegpipe.so", "segpipe/_native/segpipe.h"):
        with open(f"{out}/{name.rsplit('/', 1)[1]}", "wb") as f:
            f.write(z.read(name))
PY
done
# e_machine at byte 18 of the ELF header: 183 is AArch64, 62 x86-64.
machine() { "$py" -c 'import sys; b=open(sys.argv[1],"rb").read(20); print(b[18] | b[19] << 8)' "$1"; }
[ "$(machine "$work/lib-arm64/libsegpipe.so")" = 183 ] || { echo "the arm64 wheel's library is not AArch64 code" >&2; exit 1; }
[ "$(machine "$work/lib-amd64/libsegpipe.so")" = 62 ] || { echo "the x86_64 wheel's library is not x86-64 code" >&2; exit 1; }

src="$root/python/native/testdata/streamsum.c"
gcc -O2 -Wall -I"$work/lib-amd64" -o "$work/lib-amd64/streamsum" "$src" -L"$work/lib-amd64" -lsegpipe -Wl,-rpath,'$ORIGIN'
aarch64-linux-gnu-gcc -O2 -Wall -I"$work/lib-arm64" -o "$work/lib-arm64/streamsum" "$src" -L"$work/lib-arm64" -lsegpipe -Wl,-rpath,'$ORIGIN'
req="{\"version\":1,\"shards\":\"$shards\",\"batch_size\":4,\"imgsz\":320,\"start\":{\"seed\":3},\"epochs\":1,\"limit\":3,\"masks\":\"dense\"}"
opts='{"workers":2}'
a=$("$work/lib-amd64/streamsum" "$req" "$opts")
b=$(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$work/lib-arm64/streamsum" "$req" "$opts")
echo "amd64: $a"
echo "arm64: $b"
[ "$a" = "$b" ] || { echo "the arm64 library streams other bytes than the x86_64 one" >&2; exit 1; }
echo "arm64 wheel: the same batches, byte for byte, as the x86_64 wheel's library"
