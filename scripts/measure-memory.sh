#!/usr/bin/env bash
# Memory budget check (issue 30): runs the real binary for bench, dump,
# train and serve (N concurrent streams), each at two sizes, with
# --max-memory BUDGET, and prints per run the process's memory estimate
# (the "memory estimate" / "stream started" log lines: pipeline.Budget of
# the loaders' terms; for train the whole run: model and loaders) beside
# the measured peak RSS (wait4 maxrss through /usr/bin/time, VmHWM for
# serve). Fails when a peak exceeds its budget. Data: coco-tiny
# (../shared/data/coco-tiny, or $COCO) converted into a temp dir.
# CGROUP=1 also runs each under a 512 MiB cgroup v1 memory limit (root,
# /sys/fs/cgroup/memory writable). Run from the repository root.
set -euo pipefail
coco="${COCO:-../shared/data/coco-tiny}"
[ -d "$coco" ] || { echo "measure-memory: $coco absent, nothing measured" >&2; exit 0; }
tmp="$(mktemp -d)"
cg=/sys/fs/cgroup/memory/segpipe-measure-$$
trap 'kill "${srv:-}" 2>/dev/null || true; rm -rf "$tmp"; rmdir "$cg" 2>/dev/null || true' EXIT
CGO_ENABLED=0 go build -o "$tmp/segpipe" .
go build -o "$tmp/streamclient" ./scripts/streamclient
sp="$tmp/segpipe"
for s in train2017 val2017; do
  "$sp" --log-level warn convert coco --annotations "$coco/annotations/instances_$s.json" \
    --images "$coco/$s" --out "$tmp/shards/$s" >/dev/null
done
run=()
if [ "${CGROUP:-0}" = 1 ]; then
  mkdir "$cg" && echo $((512 << 20)) >"$cg/memory.limit_in_bytes"
  run=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg")
fi
fail=0
printf '%-6s %-44s %10s %10s %10s\n' command size estimate peak budget
report() { # command size estimate_bytes peak_kib budget_mib
  local est=$(( $3 / 1048576 )) peak=$(( $4 / 1024 ))
  printf '%-6s %-44s %7d MiB %6d MiB %6d MiB\n' "$1" "$2" "$est" "$peak" "$5"
  if [ "$peak" -gt "$5" ]; then echo "  FAIL: peak over the budget" >&2; fail=1; fi
}
measure() { # command size budget_mib args...
  local cmd=$1 size=$2 budget=$3; shift 3
  "${run[@]}" /usr/bin/time -f '%M' -o "$tmp/rss" "$sp" --log-level info "$cmd" --max-memory "${budget}MiB" "$@" \
    >"$tmp/out" 2>"$tmp/log" || { echo "$cmd $size: exit $?" >&2; tail -3 "$tmp/log" >&2; fail=1; return; }
  local est
  est=$(grep -o 'estimate_bytes=[0-9]*' "$tmp/log" | cut -d= -f2 | sort -n | tail -1)
  report "$cmd" "$size" "${est:-0}" "$(cat "$tmp/rss")" "$budget"
}
t="$tmp/shards/train2017"
measure bench "batch 8 imgsz 320 cache 32MiB repeat 4" 256 --shards "$t" --batch 8 --imgsz 320 --cache 32MiB --repeat 4 --window 128
measure bench "batch 32 imgsz 640 cache 256MiB repeat 8" 1280 --shards "$t" --batch 32 --imgsz 640 --cache 256MiB --repeat 8
measure dump "batch 8 imgsz 320, 20 batches" 256 --shards "$t" --batch 8 --imgsz 320 --batches 20 --out "$tmp/d.arrows"
measure dump "batch 32 imgsz 640, 10 batches" 1024 --shards "$t" --batch 32 --imgsz 640 --batches 10 --out "$tmp/d.arrows"
measure train "variant n batch 2 imgsz 128, 1 epoch" 1024 --shards "$t" --variant n --epochs 1 --batch 2 --imgsz 128 --device cpu --out "$tmp/r1"
measure train "variant n batch 8 imgsz 256, 1 epoch" 2048 --shards "$t" --variant n --epochs 1 --batch 8 --imgsz 256 --device cpu --out "$tmp/r2"
serve() { # size budget_mib streams batch imgsz
  local port=$((20000 + RANDOM % 20000)) i
  "${run[@]}" "$sp" --log-level info serve --shards "$tmp/shards" --addr "127.0.0.1:$port" --max-memory "${2}MiB" \
    --cache 64MiB --max-streams "$3" >/dev/null 2>"$tmp/slog" &
  srv=$!
  for _ in $(seq 100); do (: >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  local pids=()
  for i in $(seq "$3"); do
    "$tmp/streamclient" --addr "127.0.0.1:$port" --shards train2017 --batch "$4" --imgsz "$5" --epochs 2 >/dev/null 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  local peak
  peak=$(awk '/VmHWM/ {print $2}' "/proc/$srv/status")
  kill "$srv"; wait "$srv" 2>/dev/null || true
  local est
  est=$(grep -o 'estimate_bytes=[0-9]*' "$tmp/slog" | cut -d= -f2 | sort -n | tail -1)
  report serve "$1" "${est:-0}" "$peak" "$2"
}
serve "4 streams batch 8 imgsz 320" 512 4 8 320
serve "8 streams batch 16 imgsz 640" 2048 8 16 640
exit "$fail"
