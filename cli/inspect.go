package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/pipeline"
)

func inspectCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "inspect",
		Usage:     "summarise a shard directory and optionally verify it",
		UsageText: "segpipe inspect PATH|URL [--verify] [--json]",
		ArgsUsage: "PATH|URL",
		Description: "Reads PATH/manifest.json and scans the annotation columns of every shard (image\n" +
			"bytes are not read) to print the manifest summary, the schema, instances per\n" +
			"category and histograms of instances per image, points per polygon ring and\n" +
			"instance size. --verify also re-reads every shard whole and checks its size,\n" +
			"sha256 and row and instance counts against the manifest, then every row even of a\n" +
			"shard whose sha256 is stale: each image's crc32c, that it is within the pixel\n" +
			"bound, and that it decodes (JPEG and PNG with the loader's decoders, after their\n" +
			"header; pre-decoded shards: exactly width×height×3 pixels, zstd frames\n" +
			"decompressed). Every bad image is listed with its shard, row, image id and\n" +
			"reason (exit code 1 on any). --json prints the same report as one JSON object.\n\n" +
			"Example:\n  segpipe inspect shards/val2017 --verify",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "verify", Usage: "re-read every shard and check it against the manifest"},
			&ucli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			if c.NArg() != 1 {
				return usagef("inspect wants exactly one PATH (a shard directory), got %d arguments", c.NArg())
			}
			if err := checkShardDir("inspect", c.Args().First()); err != nil {
				return err
			}
			rep, err := inspect(ctx, c.Args().First(), c.Bool("verify"))
			if err != nil {
				return err
			}
			out := c.Root().Writer
			if c.Bool("json") {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				rep.print(out, 0)
			}
			if rep.Verify != nil && !rep.Verify.OK {
				n := len(rep.Verify.Problems)
				noun := "problems"
				if n == 1 {
					noun = "problem"
				}
				return fmt.Errorf("verify %s: %d %s (listed above)", rep.Dir, n, noun)
			}
			return nil
		},
	}
}

// inspectReport is what inspect prints; its JSON form is the --json output.
type inspectReport struct {
	Dir      string          `json:"dir"`
	Manifest *shard.Manifest `json:"manifest"`
	Schema   string          `json:"schema"`

	Crowd        int64           `json:"crowd_instances"`
	Rings        int64           `json:"rings"`
	Points       int64           `json:"points"`
	PerCategory  []categoryCount `json:"instances_per_category"`
	PerImage     histogram       `json:"instances_per_image"`
	RingPoints   histogram       `json:"points_per_ring"`
	InstanceSize histogram       `json:"instance_size"`
	Verify       *verifyReport   `json:"verify,omitempty"`
}

type categoryCount struct {
	shard.Category
	Instances int64 `json:"instances"`
}

type verifyReport struct {
	OK bool `json:"ok"`
	// Problems are the problems' messages, one each, in the order of Bad.
	Problems []string `json:"problems"`
	// Bad is every problem located: shard, row (-1: the whole shard),
	// image id (-1: unknown), reason and message.
	Bad     []*shard.VerifyProblem `json:"bad"`
	Shards  int                    `json:"shards"`
	Rows    int64                  `json:"rows_checked"`
	Decodes bool                   `json:"decodes"`
	Decoded int64                  `json:"images_decoded"`
	// StatsSkipped: the statistics were not computed (they would read the
	// damaged shards), so the report leaves them out.
	StatsSkipped bool `json:"statistics_skipped,omitempty"`
}

// histogram counts values into buckets [Edges[i], Edges[i+1]); the last
// bucket is open-ended.
type histogram struct {
	Label  string  `json:"label"`
	Edges  []int64 `json:"edges"`
	Counts []int64 `json:"counts"`
	Min    int64   `json:"min"`
	Max    int64   `json:"max"`
	N      int64   `json:"n"`
	Sum    float64 `json:"sum"`
}

func newHistogram(label string, edges ...int64) histogram {
	return histogram{Label: label, Edges: edges, Counts: make([]int64, len(edges)), Min: math.MaxInt64}
}

func (h *histogram) add(v int64) {
	i := 0
	for i+1 < len(h.Edges) && v >= h.Edges[i+1] {
		i++
	}
	h.Counts[i]++
	h.N++
	h.Sum += float64(v)
	h.Min = min(h.Min, v)
	h.Max = max(h.Max, v)
}

func inspect(ctx context.Context, dir string, verify bool) (*inspectReport, error) {
	set, err := shard.Open(dir)
	if err != nil {
		if errors.Is(err, shard.ErrNoManifest) {
			return nil, fmt.Errorf("%s is not a finished shard directory (no %s; an interrupted convert continues with --resume)", dir, shard.ManifestName)
		}
		return nil, err
	}
	m := set.Manifest
	r := &inspectReport{
		Dir: dir, Manifest: m, Schema: schemaTree(shard.SchemaOf(m.FormatVersion)),
		PerImage:   newHistogram("instances per image", 0, 1, 2, 3, 5, 9, 17, 33, 65),
		RingPoints: newHistogram("points per polygon ring", 3, 5, 9, 17, 33, 65, 129, 257),
		// sqrt(area) in pixels; COCO's small/medium/large split at 32 and 96.
		InstanceSize: newHistogram("instance size, sqrt(area) px", 0, 8, 16, 32, 64, 96, 128, 256, 512),
	}
	if verify {
		// Verify first: a damaged shard must be reported as such, not
		// as a failure of the statistics scan below.
		vr, err := set.VerifyWith(ctx, shard.VerifyOptions{Decode: verifyDecode()})
		if err != nil {
			return nil, err
		}
		r.Verify = &verifyReport{OK: len(vr.Problems) == 0, Problems: []string{}, Bad: vr.Problems,
			Shards: vr.Shards, Rows: vr.Rows, Decodes: vr.Decodes, Decoded: vr.Decoded}
		for _, p := range vr.Problems {
			r.Verify.Problems = append(r.Verify.Problems, p.Error())
		}
	}
	perCat := make([]int64, len(m.Categories))
	if r.Verify != nil && !r.Verify.OK {
		// Damaged shards are not parsed: the Parquet reader trusts a
		// file's footer and may crash on one that lies.
		r.Verify.StatsSkipped = true
		for i, c := range m.Categories {
			r.PerCategory = append(r.PerCategory, categoryCount{Category: c, Instances: perCat[i]})
		}
		return r, nil
	}
	var unknown int64
	err = set.Images(ctx, shard.ReadOptions{Columns: []string{shard.ColImageID, shard.ColInstances}}, func(img *shard.Image) error {
		r.PerImage.add(int64(len(img.Instances)))
		for i := range img.Instances {
			in := &img.Instances[i]
			if c := int(in.Class); c >= 0 && c < len(perCat) {
				perCat[c]++
			} else {
				unknown++
			}
			if in.IsCrowd {
				r.Crowd++
			}
			for _, ring := range in.Polygons {
				r.Rings++
				r.Points += int64(len(ring) / 2)
				r.RingPoints.add(int64(len(ring) / 2))
			}
			r.InstanceSize.add(int64(math.Sqrt(max(float64(in.Area), 0))))
		}
		return nil
	})
	if err == nil && unknown > 0 {
		err = fmt.Errorf("%s: %d instances have a class outside the manifest's %d categories", dir, unknown, len(perCat))
	}
	if err != nil {
		if r.Verify == nil || ctx.Err() != nil {
			return nil, err
		}
		// Statistics stay partial; the problem is part of the verdict.
		r.Verify.OK = false
		r.Verify.Problems = append(r.Verify.Problems, "statistics scan: "+err.Error())
	}
	for i, c := range m.Categories {
		r.PerCategory = append(r.PerCategory, categoryCount{Category: c, Instances: perCat[i]})
	}
	return r, nil
}

// schemaTree renders an Arrow schema one field a line, nested by indent.
func schemaTree(s *arrow.Schema) string {
	var b strings.Builder
	var walk func(f arrow.Field, depth int)
	walk = func(f arrow.Field, depth int) {
		null := ""
		if f.Nullable {
			null = " (nullable)"
		}
		name := f.Type.String()
		switch t := f.Type.(type) {
		case *arrow.ListType:
			name = "list"
			if _, ok := t.Elem().(arrow.NestedType); !ok {
				name = "list<" + t.Elem().String() + ">"
			}
		case *arrow.StructType:
			name = "struct"
		}
		fmt.Fprintf(&b, "%s%s: %s%s\n", strings.Repeat("  ", depth), f.Name, name, null)
		switch t := f.Type.(type) {
		case *arrow.ListType:
			if _, ok := t.Elem().(arrow.NestedType); ok {
				walk(t.ElemField(), depth+1)
			}
		case *arrow.StructType:
			for _, c := range t.Fields() {
				walk(c, depth+1)
			}
		}
	}
	for _, f := range s.Fields() {
		walk(f, 0)
	}
	return b.String()
}

// print writes the report for people. topCategories > 0 lists only the
// most frequent categories.
func (r *inspectReport) print(w io.Writer, topCategories int) {
	m := r.Manifest
	fmt.Fprintf(w, "%s: segpipe shards, format version %d\n", r.Dir, m.FormatVersion)
	fmt.Fprintf(w, "source: %s", m.Source.Kind)
	for _, k := range sortedKeys(m.Source.Args) {
		fmt.Fprintf(w, " %s=%s", k, m.Source.Args[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "images: %d   instances: %d (crowd %d)   rings: %d   points: %d\n", m.Rows, m.Instances, r.Crowd, r.Rings, r.Points)
	fmt.Fprintf(w, "shards: %d, %s (target %s a shard, row groups of %s)\n", len(m.Shards), bytesize.Format(m.Bytes), bytesize.Format(m.ShardBytes), bytesize.Format(m.RowGroupBytes))
	if p := m.Pixels; p != nil {
		side := "at their source sizes"
		if p.MaxSide > 0 {
			side = fmt.Sprintf("long side at most %d (%s resampling; annotations in the stored frame, source sizes in %s/%s)",
				p.MaxSide, p.Resample, shard.ColSourceWidth, shard.ColSourceHeight)
		}
		per := int64(0)
		if m.Rows > 0 {
			per = m.Bytes / m.Rows
		}
		fmt.Fprintf(w, "pixels: pre-decoded %s, %s, %s per image\n", p.Encoding, side, bytesize.Format(per))
	}
	for _, s := range m.Shards {
		fmt.Fprintf(w, "  %s  %6d rows  %7d instances  %10s  sha256 %s\n", s.File, s.Rows, s.Instances, bytesize.Format(s.Bytes), s.SHA256[:min(16, len(s.SHA256))])
	}
	if len(m.Skipped) == 0 {
		fmt.Fprintln(w, "skipped at conversion: nothing")
	} else {
		fmt.Fprintln(w, "skipped at conversion:")
		for _, k := range sortedKeys(m.Skipped) {
			fmt.Fprintf(w, "  %-24s %d\n", k, m.Skipped[k])
		}
	}
	fmt.Fprintf(w, "\nschema (one row per image):\n%s", indent(r.Schema, "  "))
	if r.Verify != nil && r.Verify.StatsSkipped {
		fmt.Fprintln(w, "\nstatistics: not computed (verify failed; they would read the damaged shards)")
		r.printVerify(w)
		return
	}

	cats := r.PerCategory
	if topCategories > 0 && topCategories < len(cats) {
		cats = slices.Clone(cats)
		slices.SortStableFunc(cats, func(a, b categoryCount) int { return cmp.Compare(b.Instances, a.Instances) })
		cats = cats[:topCategories]
		fmt.Fprintf(w, "\ninstances per category (%d most frequent of %d):\n", topCategories, len(r.PerCategory))
	} else {
		fmt.Fprintf(w, "\ninstances per category (%d categories):\n", len(cats))
	}
	fmt.Fprintf(w, "  %5s %-4s  %-20s %9s\n", "class", "id", "name", "instances")
	for _, c := range cats {
		fmt.Fprintf(w, "  %5d %-4d  %-20s %9d\n", c.Index, c.ID, c.Name, c.Instances)
	}
	for _, h := range []*histogram{&r.PerImage, &r.RingPoints, &r.InstanceSize} {
		fmt.Fprintln(w)
		h.print(w)
	}
	r.printVerify(w)
}

func (r *inspectReport) printVerify(w io.Writer) {
	m := r.Manifest
	if r.Verify != nil {
		fmt.Fprintln(w)
		v := r.Verify
		decoded := fmt.Sprintf("%d of %d images decoded", v.Decoded, v.Rows)
		if r.Verify.OK {
			what := "sizes, sha256, rows, instances and crc32c match the manifest; every image decodes"
			if m.Pixels != nil {
				what = "sizes, sha256, rows, instances and crc32c match the manifest; every row's pixels decode to width×height×3"
			}
			fmt.Fprintf(w, "verify: ok (%d shards, %s: %s)\n", v.Shards, decoded, what)
		} else {
			fmt.Fprintf(w, "verify: FAILED (%d shards, %d rows checked, %s)\n", v.Shards, v.Rows, decoded)
			for _, p := range r.Verify.Problems {
				fmt.Fprintf(w, "  %s\n", p)
			}
		}
	}
}

func (h *histogram) print(w io.Writer) {
	if h.N == 0 {
		fmt.Fprintf(w, "%s: no values\n", h.Label)
		return
	}
	fmt.Fprintf(w, "%s: n=%d min=%d mean=%.1f max=%d\n", h.Label, h.N, h.Min, h.Sum/float64(h.N), h.Max)
	var peak int64
	for _, c := range h.Counts {
		peak = max(peak, c)
	}
	for i, c := range h.Counts {
		var label string
		switch {
		case i+1 == len(h.Edges):
			label = fmt.Sprintf("%d+", h.Edges[i])
		case h.Edges[i+1]-h.Edges[i] == 1:
			label = fmt.Sprintf("%d", h.Edges[i])
		default:
			label = fmt.Sprintf("%d-%d", h.Edges[i], h.Edges[i+1]-1)
		}
		bar := 0
		if peak > 0 {
			bar = int((c*40 + peak - 1) / peak)
		}
		fmt.Fprintf(w, "  %9s %8d %s\n", label, c, strings.Repeat("#", bar))
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func indent(s, pre string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(pre + l)
		}
	}
	return b.String()
}

// verifyDecode returns the decoder inspect --verify checks images with:
// the loader's own (pipeline.DecodeImage). shard.VerifyWith calls it only
// for an image whose header is within the pixel bound, so it never
// allocates more than that bound allows. It is called on one goroutine:
// the pixel buffer is reused.
func verifyDecode() func(format string, data []byte, w, h int32) error {
	var buf []byte
	return func(format string, data []byte, w, h int32) error {
		gw, gh, pix, err := pipeline.DecodeImage(format, data, buf)
		if err != nil {
			return err
		}
		buf = pix
		if gw != int(w) || gh != int(h) {
			return fmt.Errorf("decoded %dx%d, the row says %dx%d", gw, gh, w, h)
		}
		return nil
	}
}
