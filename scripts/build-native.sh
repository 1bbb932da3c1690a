#!/bin/sh
# build-native.sh OUT_DIR [GOARCH]: builds libsegpipe.so, the loader as a
# shared library behind the C ABI of python/native/segpipe.h, into OUT_DIR
# (with segpipe.h beside it), for the Python package's build. Needs Go and a
# C compiler for the target (CC; for GOARCH=arm64 on x86_64, e.g.
# CC=aarch64-linux-gnu-gcc). SEGPIPE_VERSION, when set, is the version
# segpipe_version reports. SEGPIPE_TAGS, when set, is the comma-separated
# list of build tags (go build -tags): segpipe_no_gcs and segpipe_no_azblob
# leave out the gs:// and azblob:// drivers (about 24 and 3 MB of the
# library's 87; such a URL is then refused with an error that says how to
# get the driver), arrow_json_stdlib makes arrow-go use encoding/json
# (about 1 MB less; no hot path parses JSON). Unset or empty: every driver,
# the build pip install makes from a checkout or an sdist. The release
# wheels set it (scripts/build-wheels.sh); BENCHMARKS.md has the sizes.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUT_DIR [GOARCH]" >&2
	exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ $# -eq 2 ]; then
	GOARCH=$2
	export GOARCH
fi
ldflags=-s
if [ -n "${SEGPIPE_VERSION:-}" ]; then
	ldflags="$ldflags -X main.version=$SEGPIPE_VERSION"
fi
cd "$root"
CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -tags "${SEGPIPE_TAGS:-}" -ldflags="$ldflags" -o "$out/libsegpipe.so" ./python/native
# go build writes its own libsegpipe.h (non-const prototypes); segpipe.h is
# the documented header.
rm -f "$out/libsegpipe.h"
cp python/native/segpipe.h "$out/segpipe.h"
echo "built $out/libsegpipe.so (tags: ${SEGPIPE_TAGS:-none}, $(wc -c <"$out/libsegpipe.so") bytes)"
