#!/usr/bin/env bash
# Device check of the Python consumer (python/README.md):
#
#   bash python/device_check.sh SEGPIPE_BINARY OUT_DIR
#
# On a host with pyarrow and torch (default interpreter /opt/torch/.venv/bin/python,
# override with SEGPIPE_PYTHON) and no network: makes a synthetic COCO dataset with
# `segpipe synth`, converts it, serves it with `segpipe serve` on loopback, and runs
# python/tests/device_check.py, which compares FlightBatches with `segpipe dump`
# (dense and windowed masks, resume), measures both in this run, and trains a few
# YOLO26n-seg steps through the Ultralytics adapter. The Ultralytics source comes
# from .carry/ultralytics of the checkout (copy it there first, see python/README.md).
# Writes OUT_DIR/python_device_check.json; exits non-zero when anything failed or is
# missing. Takes well under 90 s on a 16-core host.
set -euo pipefail

die() { echo "python/device_check.sh: $*" >&2; exit 2; }
[[ $# -eq 2 ]] || die "usage: bash python/device_check.sh SEGPIPE_BINARY OUT_DIR"
bin=$(realpath -e "$1" 2>/dev/null) || die "segpipe binary $1 not found"
[[ -x "$bin" ]] || die "segpipe binary $bin is not executable"
mkdir -p "$2"
out=$(realpath "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
py=${SEGPIPE_PYTHON:-/opt/torch/.venv/bin/python}
[[ -x "$py" ]] || die "no Python at $py (set SEGPIPE_PYTHON to one with pyarrow and torch)"
report="$out/python_device_check.json"
ul="$repo/.carry/ultralytics"
if [[ ! -f "$ul/__init__.py" ]]; then
  # Go on with the Flight checks; the Ultralytics one then fails and says why.
  echo "python/device_check.sh: MISSING $ul: copy the Ultralytics source there before the run:" >&2
  echo "  mkdir -p .carry && cp -r ../shared/baselines/ultralytics-loader/ultralytics .carry/" >&2
fi

work=$(mktemp -d)
server=
cleanup() {
  if [[ -n "$server" ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

t0=$SECONDS
"$bin" synth --out "$work/synth" --images 64 --seed 7 --max-side 480 >"$work/synth.log" 2>&1 ||
  { cat "$work/synth.log" >&2; die "segpipe synth failed"; }
"$bin" convert coco --annotations "$work/synth/annotations/instances_train.json" \
  --images "$work/synth/images" --out "$work/shards/synth" --shard-size 1MiB >"$work/convert.log" 2>&1 ||
  { cat "$work/convert.log" >&2; die "segpipe convert coco failed"; }
echo "dataset: 64 synthetic images converted in $((SECONDS - t0)) s"

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" serve --shards "$work/shards" --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "segpipe serve: grpc://" "$work/serve.log" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; die "segpipe serve exited"; }
  sleep 0.1
done
grep -q "segpipe serve: grpc://" "$work/serve.log" || { cat "$work/serve.log" >&2; die "segpipe serve did not start in 10 s"; }

export YOLO_CONFIG_DIR="$work/ultralytics-config" YOLO_OFFLINE=true # no settings file in $HOME, no downloads

# The whole check stays under 90 s: the Python part gets what is left of 88 s
# and skips its last, optional step when that runs short.
left=$((88 - (SECONDS - t0)))
rc=0
timeout "$left" "$py" "$here/tests/device_check.py" --binary "$bin" --shards "$work/shards/synth" --set synth \
  --addr "127.0.0.1:$port" --work "$work" --report "$report" --ultralytics "$ul" --budget "$((left - 5))" || rc=$?
if [[ $rc -eq 124 ]]; then
  echo "python/device_check.sh: device_check.py ran past its ${left} s and was stopped" >&2
fi
if [[ ! -f "$report" ]]; then
  echo "{\"ok\": false, \"error\": \"device_check.py exited $rc without a report\"}" >"$report"
  [[ $rc -ne 0 ]] || rc=1
fi
echo "python device check: exit $rc in $((SECONDS - t0)) s, report $report"
exit "$rc"
