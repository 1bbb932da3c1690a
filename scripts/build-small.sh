#!/bin/sh
# build-small.sh GOARCH OUT: builds the small segpipe binary for linux/GOARCH
# (amd64 or arm64) into the file OUT: stripped, static (CGO_ENABLED=0),
# -trimpath, with -tags nocloud,nocuda. It converts, inspects, benches,
# dumps, serves and trains on the CPU like the default build; it leaves out
# the s3://, gs:// and azblob:// drivers (formats/storage refuses those URLs
# with an error naming the default build) and the run-time CUDA binding
# (train --device cuda and segpipe device report it missing). Prints the
# size; fails if it exceeds SEGPIPE_SMALL_MAX_MB (MB of 10^6 bytes; default
# 45, today's size plus a margin, so that a new dependency is noticed; the
# goal is 30, out of reach while arrow-go's Parquet packages link arrow/compute). The tag
# arrow_json_stdlib makes arrow-go use encoding/json instead of goccy/go-json
# (1.4 MB less, no hot path uses it). Sizes of each build: BENCHMARKS.md, "Binary sizes and the small build".
set -eu
if [ $# -ne 2 ]; then
	echo "usage: $0 GOARCH OUT   (GOARCH: amd64 or arm64)" >&2
	exit 2
fi
goarch=$1
out=$2
case $goarch in
amd64 | arm64) ;;
*)
	echo "$0: GOARCH $goarch: want amd64 or arm64" >&2
	exit 2
	;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
case $out in
/*) ;;
*) out=$(pwd)/$out ;;
esac
mkdir -p "$(dirname "$out")"
cd "$root"
GOOS=linux GOARCH=$goarch CGO_ENABLED=0 go build -trimpath -tags nocloud,nocuda,arrow_json_stdlib -ldflags='-s -w' -o "$out" .
size=$(wc -c <"$out")
max=${SEGPIPE_SMALL_MAX_MB:-45}
echo "$out: linux/$goarch, $size bytes ($(awk "BEGIN{printf \"%.1f\", $size/1e6}") MB), limit $max MB"
if [ "$size" -gt $((max * 1000000)) ]; then
	echo "$0: the small build is over $max MB: see BENCHMARKS.md ("Binary sizes and the small build") for what each dependency adds" >&2
	exit 1
fi
