#!/usr/bin/env bash
# scripts/scale.sh: how segpipe's costs grow with the size of a dataset.
# Run `scripts/scale.sh --help` for what it measures and how to read it.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/scale.sh N [--rle-heavy] [options]

Synthesises a dataset of N small images, then measures, each with wall time,
CPU time (user + system, all threads) and peak RSS:

  gen             making the dataset (not a segpipe cost; for context)
  convert         segpipe convert coco, one process
  convert-part    the same as --part 0/4 .. 3/4, one after another (CPU summed)
  manifest-merge  segpipe manifest merge of those parts (its manifest.json must
                  be byte-identical to the one-process conversion's)
  inspect-verify  segpipe inspect --verify (every shard re-read and checked)
  loader          the loader in one process (scalegen loader): open the set,
                  time to the first batch, then --batches batches of --batch
                  (the whole epoch if shorter); CPU per image streamed
  raster          (--rle-heavy) the CPU cost of rasterising one mask alone, one
                  goroutine, RLE or polygon as the loader does (scalegen raster)
  loader-resume   a loader started mid-epoch from order.State{consumed: N/2}:
                  time to its first batch and the size of the state
  serve           segpipe serve started cold; one client requests the set
                  (the server opens it then) and streams --serve-batches batches

The dataset:
  default      COCO-like (segpipe synth: ~7.3 polygon instances an image,
               COCO's ring lengths and size spread), images --side px
  --rle-heavy  SA-1B-like: --per-image instances an image (default 100), each
               a compressed-RLE mask (iscrowd 0); also makes a "polygon twin"
               of the reference size with the same shapes as polygons, to
               compare the cost of one mask in either encoding

Unless --ref 0, the same steps first run on a reference set of --ref images
(default N/4) and the two are compared (the regression guard CI runs as
`scripts/scale.sh 10000`):
  CPU per image of convert and of the loader at N / at ref   <= --max-ratio
  peak RSS of the loader and of serve at N <= ref * --rss-ratio + --rss-slack-mib
  time to the first batch (loader, resumed loader, serve)    <= --max-first-batch s
  resume state                                               <= 64 bytes, same fixed size
  (--rle-heavy) RLE / polygon cost per mask (convert CPU, rasterise CPU) <= 2
A broken bound fails the script (exit 1) with a FAILED line naming it.

Output: a table on stdout and one JSON (--out, default WORK/scale-N.json) with
every step record. The datasets are removed at the end unless --keep.

Options:
  --rle-heavy            SA-1B-like masks (see above)
  --ref M                reference size (default N/4; 0: none, no comparison)
  --work DIR             working directory (default /tmp/segpipe-scale-N[-rle])
  --out FILE             result JSON (default WORK/scale-N[-rle].json)
  --bin FILE             segpipe binary (default: build it into WORK)
  --side PX              image side (default 64; synth's --max-side)
  --per-image K          instances per image with --rle-heavy (default 100)
  --imgsz S              loader output side (default 128)
  --batch B              batch size (default 32)
  --batches K            loader batches to stream (default 300; fewer if the epoch is shorter)
  --serve-batches K      batches serve streams (default 20)
  --cache-mib M          decoded-image cache of the loader and of serve in MiB (default 8:
                         about 680 images of 64x64, as the default 512MiB holds about
                         570 COCO images, so the cache is full at every N and what
                         still grows is per-image state)
  --shard-size SIZE      convert --shard-size (default 8MiB: ~3,000 small images a
                         shard, about the images per shard of COCO at 256MiB)
  --max-ratio R          (default 2)    --rss-ratio R (default 1.5)
  --rss-slack-mib M      (default 64)   --max-first-batch S (default 5)
  --keep                 keep the datasets and shards
  -h, --help             this text

Examples:
  scripts/scale.sh 10000                 # the CI guard: 2,500 and 10,000 images, ~2 min on 2 cores
  scripts/scale.sh 100000 --ref 0        # one size, no comparison
  scripts/scale.sh 100000 --rle-heavy    # 25k and 100k SA-1B-like images, polygon twin at 25k
EOF
}

die() { echo "scale.sh: $*" >&2; exit 1; }
say() { printf '[scale %s %3ds] %s\n' "$(date -u +%H:%M:%S)" "$SECONDS" "$*" >&2; }

n="" rle=0 ref="" work="" out="" bin="" side=64 per_image=100 imgsz=128 batch=32 batches=300
serve_batches=20 cache_mib=8 shard_size=8MiB max_ratio=2 rss_ratio=1.5 rss_slack=64 max_first=5 keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --rle-heavy) rle=1 ;;
    --keep) keep=1 ;;
    --ref|--work|--out|--bin|--side|--per-image|--imgsz|--batch|--batches|--serve-batches|--cache-mib|--shard-size|--max-ratio|--rss-ratio|--rss-slack-mib|--max-first-batch)
      [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"
      v="$2"
      case "$1" in
        --ref) ref="$v" ;; --work) work="$v" ;; --out) out="$v" ;; --bin) bin="$v" ;;
        --side) side="$v" ;; --per-image) per_image="$v" ;; --imgsz) imgsz="$v" ;;
        --batch) batch="$v" ;; --batches) batches="$v" ;; --serve-batches) serve_batches="$v" ;; --cache-mib) cache_mib="$v" ;;
        --shard-size) shard_size="$v" ;; --max-ratio) max_ratio="$v" ;; --rss-ratio) rss_ratio="$v" ;;
        --rss-slack-mib) rss_slack="$v" ;; --max-first-batch) max_first="$v" ;;
      esac
      shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z "$n" ]] || die "one N only (got $n and $1)"; n="$1" ;;
  esac
  shift
done
[[ "$n" =~ ^[0-9]+$ && "$n" -ge 100 ]] || { usage >&2; die "N must be a number of images, at least 100"; }
[[ -n "$ref" ]] || ref=$((n / 4))
[[ "$ref" =~ ^[0-9]+$ ]] || die "--ref $ref: want a number"
if [[ "$ref" -ne 0 && ( "$ref" -lt 100 || "$ref" -ge "$n" ) ]]; then die "--ref $ref: want 0, or 100 to N-1"; fi
suffix=""; [[ $rle -eq 1 ]] && suffix="-rle"
[[ -n "$work" ]] || work="/tmp/segpipe-scale-$n$suffix"
[[ -n "$out" ]] || out="$work/scale-$n$suffix.json"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
if [[ -z "$bin" ]]; then
  say "building segpipe and scalegen into $work"
  (cd "$repo" && CGO_ENABLED=0 go build -o "$work/segpipe" . && CGO_ENABLED=0 go build -o "$work/scalegen" ./cmd/scalegen)
  bin="$work/segpipe"
else
  (cd "$repo" && CGO_ENABLED=0 go build -o "$work/scalegen" ./cmd/scalegen)
fi
sg="$work/scalegen"
[[ -x "$bin" ]] || die "$bin is not an executable segpipe binary"

# measure LABEL KIND N: every step on one dataset, records in $work/LABEL/steps.
# KIND: coco (segpipe synth), rle or polygon (scalegen gen, --per-image masks).
measure() {
  local label="$1" kind="$2" size="$3"
  local d="$work/$label" steps="$work/$label/steps"
  rm -rf "$d"; mkdir -p "$steps" "$d/parts"
  local ann="$d/data/annotations/instances_train.json" img="$d/data/images" inst
  say "$label: synthesising $size images ($kind)"
  if [[ "$kind" == coco ]]; then
    "$sg" run --out "$steps/gen.json" --step gen --n "$size" -- \
      "$bin" synth --out "$d/data" --images "$size" --max-side "$side" --seed 1 --workers 1 >/dev/null
  else
    "$sg" run --out "$steps/gen.json" --step gen --n "$size" -- \
      "$sg" gen --out "$d/data" --images "$size" --side "$side" --per-image "$per_image" --masks "$kind" --seed 1
  fi
  local conv=(convert coco --annotations "$ann" --images "$img" --shard-size "$shard_size" --log-level warn)
  say "$label: convert, one process"
  "$sg" run --out "$steps/convert.json" --step convert --n "$size" -- "$bin" "${conv[@]}" --out "$d/sets/one" >"$d/convert.log"
  inst="$(sed -n 's/^wrote [0-9]* images, \([0-9]*\) instances.*/\1/p' "$d/convert.log")"
  [[ -n "$inst" ]] || die "$label: no instance count in $d/convert.log"
  "$sg" note "$steps/convert.json" "instances=$inst"
  say "$label: convert --part I/4 (one after another), manifest merge"
  local parts=()
  for i in 0 1 2 3; do
    "$sg" run --out "$d/parts/part$i.json" --step "convert-part-$i" --n "$size" -- \
      "$bin" "${conv[@]}" --out "$d/sets/parts" --part "$i/4" >/dev/null
    parts+=("$d/parts/part$i.json")
  done
  "$sg" sum --out "$steps/convert-part.json" --step convert-part "${parts[@]}"
  "$sg" run --out "$steps/manifest-merge.json" --step manifest-merge --n "$size" -- \
    "$bin" manifest merge "$d/sets/parts" >/dev/null
  cmp -s "$d/sets/one/manifest.json" "$d/sets/parts/manifest.json" ||
    die "$label: the merged manifest differs from the one-process conversion's"
  rm -rf "$d/sets/parts"
  say "$label: inspect --verify"
  "$sg" run --out "$steps/inspect-verify.json" --step inspect-verify --n "$size" -- \
    "$bin" inspect "$d/sets/one" --verify >/dev/null
  say "$label: loader, up to $batches batches of $batch at imgsz $imgsz"
  "$sg" loader --out "$steps/loader.json" --shards "$d/sets/one" --batch "$batch" --imgsz "$imgsz" --batches "$batches" \
    --cache "$((cache_mib << 20))"
  if [[ "$kind" != coco ]]; then
    say "$label: rasterising the first block's masks alone (CPU per mask)"
    "$sg" raster --out "$steps/raster.json" --shards "$d/sets/one" --imgsz "$imgsz"
  fi
  say "$label: loader resumed at consumed=$((size / 2))"
  "$sg" loader --out "$steps/loader-resume.json" --step loader-resume --shards "$d/sets/one" \
    --batch "$batch" --imgsz "$imgsz" --batches 10 --consume "$((size / 2))" --cache "$((cache_mib << 20))"
  say "$label: serve, $serve_batches batches"
  "$sg" serve --out "$steps/serve.json" --bin "$bin" --root "$d/sets" --set one --n "$size" \
    --batch "$batch" --imgsz "$imgsz" --batches "$serve_batches" --cache "${cache_mib}MiB"
  if [[ $keep -eq 0 ]]; then rm -rf "$d/data" "$d/sets"; fi
}

kind=coco; [[ $rle -eq 1 ]] && kind=rle
say "segpipe scale run: N=$n ref=$ref kind=$kind side=${side}px imgsz=$imgsz cache=${cache_mib}MiB work=$work"
dirs=() report=()
if [[ "$ref" -ne 0 ]]; then
  measure "ref-$ref" "$kind" "$ref"
  dirs+=("$work/ref-$ref")
  report+=(--pair "ref-$ref:n-$n")
  if [[ $rle -eq 1 ]]; then
    measure "polygon-$ref" polygon "$ref"
    dirs+=("$work/polygon-$ref")
    report+=(--twin "ref-$ref:polygon-$ref")
  fi
fi
measure "n-$n" "$kind" "$n"
dirs+=("$work/n-$n")
say "report (bounds: ratio <= $max_ratio, RSS <= ref x $rss_ratio + $rss_slack MiB, first batch <= $max_first s)"
# Run labels are the directory names above the step records.
tmp="$work/report"; rm -rf "$tmp"; mkdir -p "$tmp"
for d in "${dirs[@]}"; do ln -s "$d/steps" "$tmp/$(basename "$d")"; done
labelled=()
for d in "${dirs[@]}"; do labelled+=("$tmp/$(basename "$d")"); done
if ! "$sg" report --out "$out" --max-ratio "$max_ratio" --rss-ratio "$rss_ratio" \
  --rss-slack-mib "$rss_slack" --max-first-batch "$max_first" "${report[@]}" "${labelled[@]}"; then
  die "a scaling bound is broken (FAILED above); the records are in $out"
fi
say "done in ${SECONDS}s: $out"
