package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/shard"
)

// Distributed conversion: convert --part i/n writes one slice of the
// shards a single-process conversion would write, and manifest merge joins
// the slices. Every part opens the whole source (annotations and image
// headers, no image bytes), plans the single-process shard boundaries from
// the rows' sizes, and converts the whole shards [i*S/n, (i+1)*S/n): its
// files are then byte-identical to the single-process ones, named with
// their global index, so parts share one --out without colliding.

func partFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "part", Usage: "convert only slice `I/N` (0 <= I < N) of the shards into --out, for a " +
		"distributed conversion; run every I, then 'segpipe manifest merge'"}
}

// errPartEnd stops a source at the end of a part's rows.
var errPartEnd = errors.New("end of the part's rows")

func parsePartFlag(c *ucli.Command) (*shard.Part, error) {
	if !c.IsSet("part") {
		return nil, nil
	}
	p, err := shard.ParsePart(c.String("part"))
	if err != nil {
		return nil, usagef("--part: %v", err)
	}
	return &p, nil
}

// rowSizer is what a source needs for --part: the writer's size estimate
// of every row without reading image files.
type rowSizer interface {
	RowSizes(ctx context.Context) ([]int64, error)
}

// planPart returns the shards part o.part converts, or nil without --part.
func planPart(ctx context.Context, src imageSource, o convertOpts) (*shard.PartLayout, error) {
	if o.part == nil {
		return nil, nil
	}
	rs, ok := src.(rowSizer)
	if !ok {
		return nil, fmt.Errorf("--part: this source cannot plan its shards")
	}
	sizes, err := rs.RowSizes(ctx)
	if err != nil {
		return nil, fmt.Errorf("--part: plan: %w", err)
	}
	l, err := shard.PlanShards(sizes, o.shardSize).Layout(*o.part)
	if err != nil {
		return nil, usagef("--part: %v", err)
	}
	slog.Info("part planned", "part", o.part.String(), "shards", len(l.ShardRows), "first_shard", l.FirstShard,
		"rows", l.Rows(), "first_row", l.FirstRow, "total_shards", l.TotalShards, "total_rows", l.TotalRows)
	return &l, nil
}

// rowRange is the source rows this run converts: all of them, or the
// part's.
func (o convertOpts) rowRange(n int) (lo, hi int) {
	if o.layout == nil {
		return 0, n
	}
	lo = int(o.layout.FirstRow)
	return lo, lo + int(o.layout.Rows())
}

func printPartSummary(w io.Writer, o convertOpts) {
	l := o.layout
	if l == nil {
		return
	}
	if len(l.ShardRows) == 0 {
		fmt.Fprintf(w, "part %s: no shards to write (the conversion has %d shards for %d parts)\n", l.Part, l.TotalShards, l.Part.Count)
	} else {
		fmt.Fprintf(w, "part %s: shards %d..%d of %d, rows %d..%d of %d, manifest %s\n", l.Part, l.FirstShard,
			l.FirstShard+len(l.ShardRows)-1, l.TotalShards, l.FirstRow, l.FirstRow+l.Rows()-1, l.TotalRows, shard.PartManifestName(l.Part))
	}
	fmt.Fprintf(w, "when all %d parts are done: segpipe manifest merge %s\n", l.Part.Count, shellWord(o.out))
}

// shellWord quotes s for a POSIX shell when it holds characters the shell
// would interpret (a bucket URL's ?endpoint=...&region=...), so the
// printed command can be pasted.
func shellWord(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`&|;<>()*?[]#~!{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
