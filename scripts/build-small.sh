#!/bin/sh
# build-small.sh GOARCH OUT: builds the small, read-only segpipe binary for
# linux/GOARCH (amd64 or arm64) into the file OUT, the edge profile:
# stripped, static (CGO_ENABLED=0), -trimpath, with
# -tags nocloud,nocuda,arrow_json_stdlib,pqarrow_read_only. It reads
# shards like the default build: inspect --verify, dump, bench, serve,
# train on the CPU, eval, predict; batches are byte-identical to the
# default build's. It leaves out
#   - writing shards (pqarrow_read_only: arrow-go's Parquet write path, and
#     with it formats/shard's writer): convert and quickstart are refused as
#     usage errors (exit 2) with a message naming the full build; convert
#     with the default build and copy the shards to the device;
#   - the s3://, gs:// and azblob:// drivers (nocloud: formats/storage
#     refuses those URLs with an error naming the default build);
#   - the run-time CUDA binding (nocuda: train --device cuda and segpipe
#     device report it missing);
#   - goccy/go-json (arrow_json_stdlib: arrow-go uses encoding/json, 1.4 MB
#     less, no hot path uses it).
# Prints the size; fails if it exceeds SEGPIPE_SMALL_MAX_MB (MB of 10^6
# bytes; default 45, today's size plus a margin, so that a new dependency
# is noticed). The goal, 30 MB for arm64, is out of reach while arrow-go's
# Parquet read path calls arrow/compute (pqarrow's fixed-size-list and
# dictionary readers), which links every compute kernel through the
# function registry: about 9.6 MB of the arm64 binary. Sizes of each
# build: BENCHMARKS.md, "Binary sizes and the small build".
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
GOOS=linux GOARCH=$goarch CGO_ENABLED=0 go build -trimpath -tags nocloud,nocuda,arrow_json_stdlib,pqarrow_read_only -ldflags='-s -w' -o "$out" .
size=$(wc -c <"$out")
max=${SEGPIPE_SMALL_MAX_MB:-45}
echo "$out: linux/$goarch, $size bytes ($(awk "BEGIN{printf \"%.1f\", $size/1e6}") MB), limit $max MB"
if [ "$size" -gt $((max * 1000000)) ]; then
	echo "$0: the small build is over $max MB: see BENCHMARKS.md ("Binary sizes and the small build") for what each dependency adds" >&2
	exit 1
fi
