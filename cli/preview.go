package cli

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/preview"
)

func previewCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "preview",
		Usage:     "render a training batch as a contact sheet (PNG)",
		UsageText: "segpipe preview --shards DIR --out preview.png [--grid-out grid.png] [--batch 16] [--skip K]",
		Description: "Takes one batch from the loader (after skipping --skip batches) and draws every\n" +
			"image with its instances: translucent mask overlays upsampled from the stride-4\n" +
			"grid with outlines, boxes and class names from the manifest. --grid-out also draws\n" +
			"the raw mask grid (one block per cell, overlaps in white, boxes at grid scale).\n\n" +
			"Example:\n  segpipe preview --shards shards/val2017 --out preview.png --grid-out grid.png",
		Flags: append(batchFlags(16),
			&ucli.StringFlag{Name: "out", Usage: "contact sheet `PNG`", Required: true},
			&ucli.StringFlag{Name: "grid-out", Usage: "also write the raw mask grid sheet to `PNG`"},
			&ucli.IntFlag{Name: "skip", Usage: "batches to skip before the one drawn"},
			&ucli.IntFlag{Name: "tile", Value: 320, Usage: "tile side in pixels"},
			&ucli.IntFlag{Name: "columns", Usage: "tiles per row (0: square sheet)"},
		),
		Action: func(ctx context.Context, c *ucli.Command) error {
			cfg, err := batchConfig(c)
			if err != nil {
				return err
			}
			if err := checkRanges(c, atLeast("skip", 0), atLeast("tile", 16), atLeast("columns", 0)); err != nil {
				return err
			}
			src, err := openShards(ctx, "--shards", c.String("shards"))
			if err != nil {
				return err
			}
			defer src.Close()
			var names []string
			for _, cat := range src.Manifest().Categories {
				for len(names) <= int(cat.Index) {
					names = append(names, "")
				}
				names[cat.Index] = cat.Name
			}
			skip := int(c.Int("skip"))
			l, err := pipeline.New(ctx, src, withEpochs(cfg, skip+1))
			if err != nil {
				return err
			}
			defer l.Close()
			for i := 0; ; i++ {
				rec, err := l.Next(ctx)
				if err != nil {
					return fmt.Errorf("preview: batch %d: %w", i, err)
				}
				if i < skip {
					rec.Release()
					continue
				}
				defer rec.Release()
				opt := preview.Options{Tile: int(c.Int("tile")), Columns: int(c.Int("columns")), Classes: names}
				sheet, err := preview.Sheet(rec, opt)
				if err != nil {
					return err
				}
				if err := writePNG(c.String("out"), sheet); err != nil {
					return err
				}
				fmt.Fprintf(c.Root().Writer, "wrote %s (%d images, %dx%d)\n", c.String("out"), rec.NumRows(), sheet.Bounds().Dx(), sheet.Bounds().Dy())
				if p := c.String("grid-out"); p != "" {
					g, err := preview.GridSheet(rec, opt)
					if err != nil {
						return err
					}
					if err := writePNG(p, g); err != nil {
						return err
					}
					fmt.Fprintf(c.Root().Writer, "wrote %s\n", p)
				}
				return nil
			}
		},
	}
}

func writePNG(path string, im image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, im); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
