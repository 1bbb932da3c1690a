#!/usr/bin/env bash
# arm64-check.sh AMD64_BINARY WORKDIR: the linux/arm64 build of segpipe under
# qemu-user (Debian's qemu-user-static) against the amd64 binary, as CI runs it.
#
# The arm64 binary converts a dataset (coco-tiny val when ../shared has it,
# else `segpipe synth`), verifies it, dumps training and validation batches,
# benches one epoch and trains one epoch of a tiny model on the CPU. Its dumps
# must be byte-identical to the amd64 binary's dumps of the same request on
# the same shards (the batch contents round explicitly, so no fused
# multiply-add changes them), and both binaries' dumps of their own
# conversions must agree too. Bench and training run on 8 images. Training is checked to run and to end with
# finite losses, not for equal numbers: the CPU trainer's floating point is
# not bit-identical across architectures (README, "arm64").
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 AMD64_BINARY WORKDIR" >&2; exit 2; }
amd=$(realpath "$1")
w=$2
mkdir -p "$w"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
[[ -n "$qemu" ]] || { echo "arm64-check: no qemu-aarch64(-static); apt-get install qemu-user-static" >&2; exit 2; }
# -tags nocuda: the static build (the default one binds CUDA at run time
# through the dynamic loader, which qemu-user would need an arm64 sysroot for).
(cd "$here" && GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -tags nocuda -o "$w/segpipe-arm64" .)
arm() { "$qemu" "$w/segpipe-arm64" "$@"; }
arm version

tiny=$here/../shared/data/coco-tiny
if [[ -d "$tiny" ]]; then
  ann=$tiny/annotations/instances_val2017.json imgs=$tiny/val2017
else
  "$amd" synth --out "$w/synth" --images 40 --seed 7 >/dev/null
  ann=$w/synth/annotations/instances_train.json imgs=$w/synth/images
fi
t=$SECONDS
arm convert coco --annotations "$ann" --images "$imgs" --out "$w/arm-shards" --shard-size 4MiB >/dev/null
"$amd" convert coco --annotations "$ann" --images "$imgs" --out "$w/amd-shards" --shard-size 4MiB >/dev/null
arm inspect "$w/arm-shards" --verify >/dev/null
echo "arm64: convert and inspect --verify ($((SECONDS - t)) s under qemu)"

fail=0
same() { # what file_a file_b
  if cmp -s "$2" "$3"; then echo "identical: $1"; else echo "DIFFERENT: $1 ($(cmp "$2" "$3" | head -1))"; fail=1; fi
}
for mode in train val; do
  flags=(--batches 3 --batch 8 --imgsz 320 --seed 3)
  [[ $mode == val ]] && flags+=(--val)
  arm dump --shards "$w/amd-shards" "${flags[@]}" --out "$w/arm-$mode.arrows" 2>/dev/null
  "$amd" dump --shards "$w/amd-shards" "${flags[@]}" --out "$w/amd-$mode.arrows" 2>/dev/null
  same "$mode dump, arm64 vs amd64, same shards" "$w/arm-$mode.arrows" "$w/amd-$mode.arrows"
  arm dump --shards "$w/arm-shards" "${flags[@]}" --out "$w/arm-own-$mode.arrows" 2>/dev/null
  same "$mode dump, each binary's own conversion" "$w/arm-own-$mode.arrows" "$w/amd-$mode.arrows"
done
# The settings whose decisions must not depend on the machine: both
# copy-paste modes (the mix partners' pastes too), mixup, cutmix, the
# ultralytics mask rule, flipud, rect in training and validation,
# multi_scale.
for set in "--copy-paste 1 --mixup 0.5 --cutmix 0.5 --flipud 0.5 --mask-rule ultralytics" \
  "--copy-paste 0.5 --copy-paste-mode mixup --mixup 0.5 --cutmix 0.5" \
  "--rect --copy-paste 1 --flipud 0.5" "--rect --val" "--multi-scale 0.5 --mixup 0.5"; do
  read -r -a extra <<<"$set"
  flags=(--batches 3 --batch 8 --imgsz 320 --seed 3 "${extra[@]}")
  arm dump --shards "$w/amd-shards" "${flags[@]}" --out "$w/arm-set.arrows" 2>/dev/null
  "$amd" dump --shards "$w/amd-shards" "${flags[@]}" --out "$w/amd-set.arrows" 2>/dev/null
  same "train dump with $set, arm64 vs amd64" "$w/arm-set.arrows" "$w/amd-set.arrows"
done

# bench and a one-epoch train on 8 synthetic images: the emulated CPU runs
# them in seconds rather than minutes.
"$amd" synth --out "$w/small" --images 8 --seed 3 --max-side 256 >/dev/null
arm convert coco --annotations "$w/small/annotations/instances_train.json" --images "$w/small/images" \
  --out "$w/small-shards" >/dev/null
arm bench --shards "$w/small-shards" --batch 4 --imgsz 128 --json >"$w/bench.json" 2>/dev/null
grep -q '"images": 8' "$w/bench.json" && echo "arm64: bench ran one epoch"
arm train --shards "$w/small-shards" --variant n --epochs 1 --batch 4 --imgsz 64 --device cpu \
  --out "$w/arm-run" >"$w/train.log" 2>&1 || { tail -20 "$w/train.log"; exit 1; }
if grep -qiE 'loss=(nan|inf)|non-finite' "$w/train.log"; then echo "arm64 train: non-finite loss"; tail -5 "$w/train.log"; fail=1; fi
echo "arm64: one epoch trained ($(grep -c '' "$w/arm-run/results.csv") lines in results.csv)"
echo "arm64 check: $((SECONDS - t)) s"
exit "$fail"
