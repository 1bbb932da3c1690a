package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
	"github.com/segpipe/segpipe/trainer/train"
)

func predictCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "predict",
		Usage:     "segment images with a trained checkpoint: PNGs with boxes and masks, COCO results JSON",
		UsageText: "segpipe predict --weights W --source IMG_OR_DIR --out DIR [--imgsz S] [--conf C]",
		Description: "Letterboxes each image, runs the model in eval mode, keeps the one-to-one detections\n" +
			"with score > --conf (top-k, no NMS), computes masks from coefficients × prototypes\n" +
			"cropped to the box, and maps boxes and masks back to the original image. Writes\n" +
			"DIR/<image>.png (boxes, labels, translucent masks) and DIR/results.json (COCO results:\n" +
			"bbox, score, category_id, segmentation as compressed RLE), which `segpipe eval` reads.\n" +
			"Image ids come from --annotations (file_name → id), else from numeric file names.\n" +
			"For mAP use a low --conf (0.001, as validation does).\n\n" +
			"Examples:\n  segpipe predict --weights runs/n/best.safetensors --source images/ --out preds\n" +
			"  segpipe predict --weights runs/n/last.safetensors --source val2017 --conf 0.001 --no-draw \\\n" +
			"    --annotations instances_val2017.json --out preds && \\\n" +
			"    segpipe eval --annotations instances_val2017.json --detections preds/results.json",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "weights", Usage: "checkpoint `FILE` (last.safetensors or best.safetensors of a run)", Required: true},
			&ucli.StringFlag{Name: "source", Usage: "an image `FILE` or a DIR of .jpg/.png images", Required: true},
			&ucli.StringFlag{Name: "out", Usage: "output `DIR`", Required: true},
			&ucli.IntFlag{Name: "imgsz", Usage: "letterbox side (0: the checkpoint's training size)"},
			&ucli.FloatFlag{Name: "conf", Value: 0.25, Usage: "keep detections with score > `C`"},
			&ucli.IntFlag{Name: "max-det", Value: 300, Usage: "detections per image before --conf"},
			&ucli.IntFlag{Name: "batch", Value: 4, Usage: "images per forward"},
			&ucli.IntFlag{Name: "workers", Usage: "decode goroutines (0: GOMAXPROCS)"},
			&ucli.StringFlag{Name: "annotations", Usage: "COCO instances `FILE` mapping file names to image ids"},
			&ucli.BoolFlag{Name: "no-draw", Usage: "write results.json only"},
			&ucli.StringFlag{Name: "device", Value: "cpu", Usage: "backend `D`: cpu, emu (emulated device, same numbers) or cuda (GPU 0; TF32 only with SEGPIPE_TF32=1)"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			if err := checkRanges(c, atLeast("imgsz", 0), atLeast("max-det", 1), atLeast("batch", 1), atLeast("workers", 0)); err != nil {
				return err
			}
			dev, err := device.Open(c.String("device"))
			if err != nil {
				return err
			}
			// After the device: a host without it is told so first.
			for _, in := range []struct {
				flag  string
				dirOK bool
			}{{"weights", false}, {"source", true}, {"annotations", false}} {
				if p := c.String(in.flag); p != "" {
					if err := checkInputPath("--"+in.flag, p, in.dirOK); err != nil {
						return err
					}
				}
			}
			m, meta, err := model.OpenCheckpoint(c.String("weights"))
			if err != nil {
				return err
			}
			m.To(dev.Backend)
			cats, err := train.CheckpointCategories(meta)
			if err != nil {
				return err
			}
			imgsz := int(c.Int("imgsz"))
			if imgsz == 0 {
				imgsz = meta.Imgsz
			}
			if imgsz == 0 {
				imgsz = 640
			}
			if imgsz%32 != 0 || imgsz < 32 {
				return usagef("--imgsz %d: want a positive multiple of 32", imgsz)
			}
			conf := c.Float("conf")
			if !(conf > 0 && conf < 1) {
				return usagef("--conf %v: want 0 < C < 1", conf)
			}
			files, err := predict.Sources(c.String("source"))
			if err != nil {
				return err
			}
			opt := predict.Options{Imgsz: imgsz, Conf: float32(conf), MaxDet: int(c.Int("max-det")), Batch: int(c.Int("batch")),
				Workers: int(c.Int("workers")), Categories: cats, NoDraw: c.Bool("no-draw")}
			if a := c.String("annotations"); a != "" {
				if opt.ImageIDs, err = imageIDsOf(a); err != nil {
					return err
				}
			}
			sum, err := predict.Run(ctx, m, files, c.String("out"), opt)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Root().Writer, "%d images, %d detections (score > %g) → %s\n", sum.Images, sum.Detections, conf, sum.ResultsPath)
			return nil
		},
	}
}

// imageIDsOf maps file names (base names) to image ids from a COCO file.
func imageIDsOf(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Images []struct {
			ID       int64  `json:"id"`
			FileName string `json:"file_name"`
		} `json:"images"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]int64, len(doc.Images))
	for _, im := range doc.Images {
		out[baseName(im.FileName)] = im.ID
	}
	return out, nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' || p[i] == '\\' {
			return p[i+1:]
		}
	}
	return p
}
