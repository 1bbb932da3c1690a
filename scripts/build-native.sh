#!/bin/sh
# build-native.sh OUT_DIR [GOARCH]: builds libsegpipe.so, the loader as a
# shared library behind the C ABI of python/native/segpipe.h, into OUT_DIR
# (with segpipe.h beside it), for the Python package's build. Needs Go and a
# C compiler for the target (CC; for GOARCH=arm64 on x86_64, e.g.
# CC=aarch64-linux-gnu-gcc). SEGPIPE_VERSION, when set, is the version
# segpipe_version reports.
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
CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -ldflags="$ldflags" -o "$out/libsegpipe.so" ./python/native
# go build writes its own libsegpipe.h (non-const prototypes); segpipe.h is
# the documented header.
rm -f "$out/libsegpipe.h"
cp python/native/segpipe.h "$out/segpipe.h"
echo "built $out/libsegpipe.so"
