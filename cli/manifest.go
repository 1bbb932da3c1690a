package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/formats/storage"
	"github.com/segpipe/segpipe/internal/bytesize"
)

func manifestCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "manifest",
		Usage: "work on shard directories' manifests",
		Description: "Sub-commands that read or write manifest.json without touching the shards' rows.\n\n" +
			"Example:\n  segpipe manifest merge shards/train2017",
		Commands: []*ucli.Command{manifestMergeCommand()},
	}
}

func manifestMergeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "merge",
		Usage:     "join the parts of a distributed conversion into manifest.json",
		UsageText: "segpipe manifest merge DIR [--verify] [--wait DURATION]",
		ArgsUsage: "DIR",
		Description: "After every 'segpipe convert ... --part I/N --out DIR' has finished, DIR (a path or\n" +
			"a bucket URL such as s3://bucket/prefix, as given to --out) holds the shards and N\n" +
			"part manifests (manifest.part-IIIII-of-NNNNN.json). merge checks that the parts\n" +
			"belong to one conversion (same source, categories, format version, shard size and\n" +
			"skip counts; every part present once; rows and shards contiguous, none overlapping),\n" +
			"checks every shard's size (--verify: its sha256 too), writes\n" +
			"manifest.json and removes the part manifests. The manifest is byte-identical to\n" +
			"the one a single 'segpipe convert' of the same input and flags writes. Merging a\n" +
			"directory already merged does nothing. --wait keeps looking for missing parts\n" +
			"(every 10s) for up to DURATION, so the merge can be started beside the parts.\n\n" +
			"Example:\n" +
			"  for i in 0 1 2 3; do segpipe convert coco --annotations a.json --images img \\\n" +
			"      --out shards --part $i/4 & done; wait\n" +
			"  segpipe manifest merge shards\n" +
			"  segpipe manifest merge --verify s3://my-datasets/coco/train2017",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "verify", Usage: "re-read every shard and check its sha256, not only its size"},
			&ucli.DurationFlag{Name: "wait", Usage: "wait up to `DURATION` (e.g. 6h) for parts still running"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			if c.NArg() != 1 {
				return usagef("manifest merge wants exactly one DIR (the --out of the parts), got %d arguments", c.NArg())
			}
			dir := c.Args().First()
			// With --wait the directory may not exist yet: the parts,
			// started beside the merge, create it.
			if c.Duration("wait") <= 0 {
				if err := checkShardDir("manifest merge DIR", dir); err != nil {
					return err
				}
			}
			d, err := storage.Open(ctx, dir, nil)
			if err != nil {
				return usagef("manifest merge %s: %v", dir, err)
			}
			defer d.Close()
			m, err := mergeWaiting(ctx, d, shard.MergeOptions{Verify: c.Bool("verify")}, c.Duration("wait"))
			if errors.Is(err, shard.ErrComplete) {
				fmt.Fprintf(c.Root().Writer, "%s is already merged; nothing to do.\n", dir)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Root().Writer, "merged %d shards (%d images, %d instances, %s) into %s\n",
				len(m.Shards), m.Rows, m.Instances, bytesize.Format(m.Bytes), d.Join(shard.ManifestName))
			return nil
		},
	}
}

// mergePoll is how often merge --wait looks for the missing parts.
var mergePoll = 10 * time.Second

// mergeWaiting merges d, retrying while parts are missing (or none has
// finished yet) until wait has passed.
func mergeWaiting(ctx context.Context, d *storage.Dir, opts shard.MergeOptions, wait time.Duration) (*shard.Manifest, error) {
	deadline := time.Now().Add(wait)
	for {
		m, err := shard.MergeDir(d, opts)
		waiting := errors.Is(err, shard.ErrMissingParts) || errors.Is(err, shard.ErrNoParts) || errors.Is(err, os.ErrNotExist)
		if !waiting || time.Now().Add(mergePoll).After(deadline) {
			return m, err
		}
		slog.Info("waiting for parts", "dir", d.String(), "reason", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(mergePoll):
		}
	}
}
