package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/trainer/metrics"
)

func evalCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "eval",
		Usage:     "score a COCO results file with COCO box and mask mAP",
		UsageText: "segpipe eval --annotations FILE --detections FILE [--iou-type bbox|segm|both] [--json] [--per-category]",
		Description: "Scores detections in the COCO results format (a JSON list of {image_id, category_id,\n" +
			"score, bbox and/or segmentation}) against COCO instances ground truth with the exact\n" +
			"semantics of pycocotools' COCOeval and its default parameters, and prints the familiar\n" +
			"12-line summary per IoU type (--json prints the summary and per-category statistics).\n" +
			"Results whose first entry has a bbox are read as box results (area = box area), as\n" +
			"COCO.loadRes does. Unknown image or category ids, malformed RLE and non-finite scores\n" +
			"are errors naming the detection's index.\n\n" +
			"Example:\n  segpipe eval --annotations instances_val2017.json --detections results.json --iou-type both",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "annotations", Usage: "COCO instances JSON (ground truth)", Required: true},
			&ucli.StringFlag{Name: "detections", Usage: "COCO results JSON", Required: true},
			&ucli.StringFlag{Name: "iou-type", Value: "both", Usage: "bbox, segm or both"},
			&ucli.BoolFlag{Name: "json", Usage: "print results as JSON"},
			&ucli.BoolFlag{Name: "per-category", Usage: "also print AP, AP50, AP75 and AR100 per category"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			for _, flag := range []string{"annotations", "detections"} {
				if err := checkInputPath("--"+flag, c.String(flag), false); err != nil {
					return err
				}
			}
			var types []metrics.IoUType
			switch t := c.String("iou-type"); t {
			case "bbox":
				types = []metrics.IoUType{metrics.BBox}
			case "segm":
				types = []metrics.IoUType{metrics.Segm}
			case "both":
				types = []metrics.IoUType{metrics.BBox, metrics.Segm}
			default:
				return usagef("--iou-type %q: want bbox, segm or both", t)
			}
			return runEval(c.Root().Writer, c.String("annotations"), c.String("detections"), types, c.Bool("json"), c.Bool("per-category"))
		},
	}
}

func runEval(w io.Writer, annPath, detPath string, types []metrics.IoUType, asJSON, perCategory bool) error {
	ds, err := metrics.ReadDatasetFile(annPath)
	if err != nil {
		return err
	}
	readAs := metrics.BBox
	for _, t := range types {
		if t == metrics.Segm {
			readAs = metrics.Segm
		}
	}
	dets, err := metrics.ReadResultsFile(ds, detPath, readAs)
	if err != nil {
		return err
	}
	if len(types) == 2 && len(dets) > 0 && allMasksFromBoxes(dets) {
		slog.Warn("results carry no segmentation; skipping segm evaluation", "detections", detPath, "reason", "box-only results")
		types = types[:1]
	}
	var results []*metrics.Result
	for _, t := range types {
		res, err := metrics.Evaluate(ds, dets, t)
		if err != nil {
			return fmt.Errorf("%s: %w", detPath, err)
		}
		results = append(results, res)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	for i, res := range results {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "IoU type: %s (%d images, %d detections)\n", res.IoUType, len(ds.Images), len(dets))
		if err := res.WriteTable(w); err != nil {
			return err
		}
		if perCategory {
			if err := writePerCategory(w, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// writePerCategory prints one line per category with ground truth; "-"
// marks a value COCOeval leaves undefined (-1).
func writePerCategory(w io.Writer, res *metrics.Result) error {
	if _, err := fmt.Fprintf(w, "\n%8s  %-20s %6s %6s %6s %6s\n", "category", "name", "AP", "AP50", "AP75", "AR100"); err != nil {
		return err
	}
	cell := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", v)
	}
	for _, c := range res.PerCategory {
		if c.Stats[8] < 0 {
			continue // no ground truth of this category
		}
		if _, err := fmt.Fprintf(w, "%8d  %-20s %6s %6s %6s %6s\n", c.ID, c.Name, cell(c.Stats[0]), cell(c.Stats[1]), cell(c.Stats[2]), cell(c.Stats[8])); err != nil {
			return err
		}
	}
	return nil
}

func allMasksFromBoxes(dets []metrics.Detection) bool {
	for i := range dets {
		if !dets[i].MaskFromBox {
			return false
		}
	}
	return true
}
