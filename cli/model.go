package cli

import (
	"context"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/trainer/model"
)

func modelCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "model",
		Usage: "inspect the YOLO26-seg model family",
		Commands: []*ucli.Command{
			{
				Name:      "summary",
				Usage:     "print a model's layers, parameter counts and FLOPs",
				UsageText: "segpipe model summary --variant n|s|m|l|x [--classes K] [--imgsz 640] [--deploy] [--fuse]",
				Description: "Prints each layer (index, from, repeats, module, resolved arguments, parameters,\n" +
					"GFLOPs), then the parameters of the full training graph, of its training-only parts\n" +
					"(one-to-many head branches, semantic auxiliary branch), of the deployed model with\n" +
					"and without BatchNorm folded, and FLOPs at --imgsz for batch 1 as 2×MACs. --deploy\n" +
					"shows the inference model (one-to-one head only); --fuse folds BatchNorm into the\n" +
					"convolutions. No weights are allocated, so every scale is instant.\n\n" +
					"Example:\n  segpipe model summary --variant s --deploy --fuse",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "variant", Usage: "n, s, m, l or x", Required: true},
					&ucli.IntFlag{Name: "classes", Value: model.DefaultClasses, Usage: "number of classes"},
					&ucli.IntFlag{Name: "imgsz", Value: 640, Usage: "square input size for FLOPs (multiple of 32)"},
					&ucli.BoolFlag{Name: "deploy", Usage: "summarise the deployed (inference) model"},
					&ucli.BoolFlag{Name: "fuse", Usage: "fold BatchNorm into the convolutions"},
				},
				Action: func(ctx context.Context, c *ucli.Command) error {
					if _, err := model.LookupScale(c.String("variant")); err != nil {
						return usagef("--variant %q: want n, s, m, l or x", c.String("variant"))
					}
					if err := checkRanges(c, atLeast("classes", 1)); err != nil {
						return err
					}
					if s := c.Int("imgsz"); s <= 0 || s%32 != 0 {
						return usagef("--imgsz %d: want a positive multiple of 32", s)
					}
					m, err := model.Describe(model.Config{Variant: c.String("variant"), Classes: int(c.Int("classes"))})
					if err != nil {
						return err
					}
					if c.Bool("deploy") {
						if m, err = m.Deploy(c.Bool("fuse")); err != nil {
							return err
						}
					} else if c.Bool("fuse") {
						if m, err = m.Fuse(); err != nil {
							return err
						}
					}
					sum, err := m.Summarise(int(c.Int("imgsz")))
					if err != nil {
						return err
					}
					return sum.Write(c.Root().Writer)
				},
			},
		},
	}
}
