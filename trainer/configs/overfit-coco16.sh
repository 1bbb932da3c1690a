#!/bin/sh
# Overfit check: variant n trained from random weights on 16 real COCO
# images (the 16 lowest ids with annotations in coco-tiny's train2017)
# until those images reach mask mAP50 >= 0.9, scored by `segpipe eval`
# (pycocotools' COCOeval) on `segpipe predict` output. It shows that the
# assigner, losses, gradients, optimiser and post-processing work together.
#
#   sh trainer/configs/overfit-coco16.sh            # from the repository root
#   SHARED=/path/to/shared OUT=/tmp/ov sh trainer/configs/overfit-coco16.sh
#   CONFIG=my-320px.json sh trainer/configs/overfit-coco16.sh  # another config
#
# About an hour on 2 CPU cores (250 epochs at 640 px, 16 images).
set -eu
SHARED=${SHARED:-../shared}
OUT=${OUT:-runs/overfit-coco16}
SEGPIPE=${SEGPIPE:-go run .}
CONFIG=${CONFIG:-trainer/configs/overfit-coco16.json}
TINY="$SHARED/data/coco-tiny"
mkdir -p "$OUT/images"

python3 - "$TINY/annotations/instances_train2017.json" "$OUT/train16.json" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
d = json.load(open(src))
annotated = {a["image_id"] for a in d["annotations"]}
keep = set(sorted(i["id"] for i in d["images"] if i["id"] in annotated)[:16])
json.dump({"images": [i for i in d["images"] if i["id"] in keep],
           "annotations": [a for a in d["annotations"] if a["image_id"] in keep],
           "categories": d["categories"]}, open(dst, "w"))
PY
python3 - "$OUT/train16.json" "$TINY/train2017" "$OUT/images" <<'PY'
import json, os, sys
for i in json.load(open(sys.argv[1]))["images"]:
    link = os.path.join(sys.argv[3], i["file_name"])
    if not os.path.exists(link):
        os.symlink(os.path.abspath(os.path.join(sys.argv[2], i["file_name"])), link)
PY

$SEGPIPE convert coco --annotations "$OUT/train16.json" --images "$TINY/train2017" --out "$OUT/shards"
$SEGPIPE train --shards "$OUT/shards" --config "$CONFIG" --out "$OUT/run"
$SEGPIPE predict --weights "$OUT/run/last.safetensors" --source "$OUT/images" --out "$OUT/pred" \
    --conf 0.001 --annotations "$OUT/train16.json"
$SEGPIPE eval --annotations "$OUT/train16.json" --detections "$OUT/pred/results.json" --iou-type both
