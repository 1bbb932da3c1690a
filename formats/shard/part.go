package shard

import (
	"fmt"
	"strconv"
	"strings"
)

// Part names one of Count slices of a distributed conversion, Index
// counted from 0.
type Part struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// ParsePart reads "i/n" (0 <= i < n), the form of convert --part.
func ParsePart(s string) (Part, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return Part{}, fmt.Errorf("%q is not a part like 3/8 (index/count, index from 0)", s)
	}
	p := Part{Index: i, Count: n}
	if err := p.check(); err != nil {
		return Part{}, err
	}
	return p, nil
}

func (p Part) check() error {
	if p.Count < 1 || p.Index < 0 || p.Index >= p.Count {
		return fmt.Errorf("part %d/%d: want 0 <= index < count", p.Index, p.Count)
	}
	return nil
}

// String is the "i/n" form ParsePart reads.
func (p Part) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

func (p Part) tag() string { return fmt.Sprintf("%05d-of-%05d", p.Index, p.Count) }

// PartManifestName is the file a part of a distributed conversion writes
// beside its shards in place of manifest.json.
func PartManifestName(p Part) string { return "manifest.part-" + p.tag() + ".json" }

func partJournalName(p Part) string { return ".segpipe-progress.part-" + p.tag() + ".json" }

// PlannedRowSize is the writer's size estimate of img's row when the
// image file, imageBytes long, is not loaded (img.Bytes is ignored). A
// pre-decoded row (img.Format FormatRaw or FormatZstd, img.Width and
// Height the stored size, instances in the stored frame) is estimated from
// its size alone and imageBytes is ignored. A plan made with it cuts
// shards exactly where a Writer fed the full rows does.
func PlannedRowSize(img *Image, imageBytes int64) int64 {
	if Predecoded(img.Format) {
		return rowSize(img)
	}
	return rowSize(img) - int64(len(img.Bytes)) + imageBytes
}

// Plan is the shard layout of a whole conversion, as a single Writer cuts
// it: ShardRows[k] rows go into shard k.
type Plan struct {
	ShardRows []int64
}

// PlanShards cuts rows of the given estimated sizes (PlannedRowSize) into
// shards with the Writer's rule: a shard closes after the row that brings
// it to shardBytes or more (<= 0: DefaultShardBytes).
func PlanShards(sizes []int64, shardBytes int64) Plan {
	if shardBytes <= 0 {
		shardBytes = DefaultShardBytes
	}
	var p Plan
	var rows, est int64
	for _, s := range sizes {
		rows++
		est += s
		if est >= shardBytes {
			p.ShardRows = append(p.ShardRows, rows)
			rows, est = 0, 0
		}
	}
	if rows > 0 {
		p.ShardRows = append(p.ShardRows, rows)
	}
	return p
}

// Layout returns what part p converts: the contiguous run of whole shards
// [k*S/n, (k+1)*S/n) of the plan's S shards. Whole shards make the parts'
// files byte-identical to a single-process conversion's; a part may be
// empty when there are fewer shards than parts.
func (pl Plan) Layout(p Part) (PartLayout, error) {
	if err := p.check(); err != nil {
		return PartLayout{}, err
	}
	s := len(pl.ShardRows)
	lo, hi := p.Index*s/p.Count, (p.Index+1)*s/p.Count
	l := PartLayout{Part: p, FirstShard: lo, ShardRows: append([]int64{}, pl.ShardRows[lo:hi]...), TotalShards: s}
	for k, r := range pl.ShardRows {
		if k < lo {
			l.FirstRow += r
		}
		l.TotalRows += r
	}
	return l, nil
}

// PartLayout is one part's slice of a Plan, recorded in its part manifest
// so that a merge can check the parts tile the whole conversion.
type PartLayout struct {
	Part        Part    `json:"part"`
	FirstShard  int     `json:"first_shard"` // global index of the part's first shard
	FirstRow    int64   `json:"first_row"`   // global row of its first row
	ShardRows   []int64 `json:"shard_rows"`  // planned rows of each of its shards
	TotalShards int     `json:"total_shards"`
	TotalRows   int64   `json:"total_rows"`
}

// Rows is the number of rows of the part.
func (l PartLayout) Rows() int64 {
	var n int64
	for _, r := range l.ShardRows {
		n += r
	}
	return n
}

// owns reports whether a shard file name, or an atomic-write temporary of
// one, belongs to this part.
func (l PartLayout) owns(name string) bool {
	for k := range l.ShardRows {
		s := ShardName(l.FirstShard + k)
		if name == s || strings.HasPrefix(name, "."+s+".tmp-") {
			return true
		}
	}
	return false
}

// PartManifest is the content of a part's manifest: the manifest fields
// for its own shards, and its layout.
type PartManifest struct {
	Manifest
	Layout PartLayout `json:"layout"`
}

// The Writer's part-mode hooks: names and checks that differ when
// WriterOptions.Layout is set.

func (w *Writer) firstShard() int {
	if w.opts.Layout == nil {
		return 0
	}
	return w.opts.Layout.FirstShard
}

func (w *Writer) manifestName() string {
	if w.opts.Layout == nil {
		return ManifestName
	}
	return PartManifestName(w.opts.Layout.Part)
}

func (w *Writer) journalName() string {
	if w.opts.Layout == nil {
		return ProgressName
	}
	return partJournalName(w.opts.Layout.Part)
}

func (w *Writer) readOwnManifest() (*Manifest, error) {
	if w.opts.Layout == nil {
		return readManifest(w.ctx, w.dir)
	}
	pm, err := readPartManifest(w.ctx, w.dir, w.opts.Layout.Part)
	if err != nil {
		return nil, err
	}
	return &pm.Manifest, nil
}

// encodeManifest renders what Close writes: the manifest, or for a part
// the part manifest, after checking that the shards are the planned ones
// (a source whose files changed between planning and writing would cut
// elsewhere, and the merged manifest would not be the single-process one).
func (w *Writer) encodeManifest(m *Manifest) ([]byte, error) {
	l := w.opts.Layout
	if l == nil {
		return m.encode()
	}
	if len(m.Shards) != len(l.ShardRows) {
		return nil, fmt.Errorf("part %s: wrote %d shards, the plan has %d", l.Part, len(m.Shards), len(l.ShardRows))
	}
	for k, s := range m.Shards {
		if s.Rows != l.ShardRows[k] {
			return nil, fmt.Errorf("part %s: shard %s has %d rows, the plan has %d (did the source change?)", l.Part, s.File, s.Rows, l.ShardRows[k])
		}
	}
	return (&PartManifest{Manifest: *m, Layout: *l}).encode()
}
