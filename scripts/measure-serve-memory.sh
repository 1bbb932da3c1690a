#!/usr/bin/env bash
# Peak RSS of `segpipe serve` while it streams one stream of coco-tiny
# train2017 (batch 32, imgsz 640, windowed masks, default augmentation) to
# scripts/streamclient: the figure deploy/serve.yaml's memory request is
# sized from. Usage: scripts/measure-serve-memory.sh [serve flags...]
# (e.g. --workers 4 --cache 256MiB). Run from the repository root.
set -euo pipefail
tmp="$(mktemp -d)"
trap 'kill "${srv:-}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
coco=../shared/data/coco-tiny
CGO_ENABLED=0 go build -o "$tmp/segpipe" .
go build -o "$tmp/streamclient" ./scripts/streamclient
"$tmp/segpipe" --log-level warn convert coco --annotations "$coco/annotations/instances_train2017.json" \
  --images "$coco/train2017" --out "$tmp/shards/train2017" >/dev/null
port=$((20000 + RANDOM % 20000))
"$tmp/segpipe" --log-level warn serve --shards "$tmp/shards" --addr "127.0.0.1:$port" "$@" >/dev/null &
srv=$!
for _ in $(seq 100); do (: >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
idle=$(awk '/VmRSS/ {print $2}' "/proc/$srv/status")
"$tmp/streamclient" --addr "127.0.0.1:$port" --shards train2017 --batch 32 --imgsz 640 --epochs "${EPOCHS:-3}"
peak=$(awk '/VmHWM/ {print $2}' "/proc/$srv/status")
echo "serve flags: ${*:-(defaults)}"
echo "idle RSS: $((idle / 1024)) MiB; peak RSS over the stream: $((peak / 1024)) MiB (VmHWM)"
