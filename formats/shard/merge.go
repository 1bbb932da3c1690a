package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/formats/storage"
)

// ErrNoParts is returned by Merge when the directory holds no part
// manifest.
var ErrNoParts = errors.New("no part manifests (manifest.part-*.json)")

// ErrMissingParts is returned by Merge when some of the parts have not
// written their part manifest yet.
var ErrMissingParts = errors.New("parts missing")

var partManifestRE = regexp.MustCompile(`^manifest\.part-([0-9]{5,})-of-([0-9]{5,})\.json$`)

// ReadPartManifest reads and checks the manifest part p wrote in dir, a
// path or a URL.
func ReadPartManifest(dir string, p Part) (*PartManifest, error) {
	d, err := storage.Open(context.Background(), dir, nil)
	if err != nil {
		return nil, err
	}
	return readPartManifest(context.Background(), d, p)
}

func readPartManifest(ctx context.Context, d *storage.Dir, p Part) (*PartManifest, error) {
	var pm PartManifest
	if err := readManifestFile(ctx, d, PartManifestName(p), &pm); err != nil {
		return nil, err
	}
	if pm.Layout.Part != p {
		return nil, fmt.Errorf("%s: says it is part %s", d.Join(PartManifestName(p)), pm.Layout.Part)
	}
	return &pm, nil
}

// check is Manifest.check plus the layout: the part's shards are the ones
// the layout names, with the planned rows.
func (pm *PartManifest) check() error {
	if err := pm.Manifest.check(); err != nil {
		return err
	}
	l := &pm.Layout
	if err := l.Part.check(); err != nil {
		return err
	}
	if len(pm.Shards) != len(l.ShardRows) {
		return fmt.Errorf("part %s lists %d shards, its layout %d", l.Part, len(pm.Shards), len(l.ShardRows))
	}
	for k, s := range pm.Shards {
		if want := ShardName(l.FirstShard + k); s.File != want || s.Rows != l.ShardRows[k] {
			return fmt.Errorf("part %s shards[%d]: %s with %d rows, its layout says %s with %d", l.Part, k, s.File, s.Rows, want, l.ShardRows[k])
		}
	}
	return nil
}

func (pm *PartManifest) encode() ([]byte, error) { return encodeJSON(pm) }

// MergeOptions configures Merge.
type MergeOptions struct {
	// Verify hashes every shard against its sha256; otherwise only sizes
	// are checked.
	Verify bool
}

// Merge joins the part manifests that the parts of a distributed
// conversion wrote in dir, a path or a URL (see formats/storage), into
// manifest.json, byte-identical to the one a single-process conversion of
// the same input and options writes, then removes the part manifests. It
// refuses parts that do not belong together: another part count, format
// version, source, category table, size targets or skip counts, a missing
// or repeated part, or layouts that overlap or leave a gap. A dir already
// merged (manifest.json and no part manifests) gives ErrComplete.
func Merge(dir string, opts MergeOptions) (*Manifest, error) {
	d, err := storage.Open(context.Background(), dir, nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return MergeDir(d, opts)
}

// MergeDir is Merge for a location already opened through formats/storage.
// The manifest is written as the Writer writes it (in a bucket: uploaded,
// read back and checked), after every shard it names has been checked.
func MergeDir(d *storage.Dir, opts MergeOptions) (*Manifest, error) {
	ctx := context.Background()
	names, err := d.List(ctx)
	if err != nil {
		return nil, err
	}
	var parts []*PartManifest
	hasManifest := false
	for _, n := range names {
		if n == ManifestName {
			hasManifest = true
		}
		sm := partManifestRE.FindStringSubmatch(n)
		if sm == nil {
			continue
		}
		i, _ := strconv.Atoi(sm[1])
		c, _ := strconv.Atoi(sm[2])
		p := Part{Index: i, Count: c}
		if p.check() != nil || PartManifestName(p) != n {
			return nil, fmt.Errorf("%s: %s is not a part manifest name this segpipe writes", d, n)
		}
		pm, err := readPartManifest(ctx, d, p)
		if err != nil {
			return nil, err
		}
		parts = append(parts, pm)
	}
	if len(parts) == 0 {
		if hasManifest {
			return nil, fmt.Errorf("%s: %w (already merged)", d, ErrComplete)
		}
		return nil, fmt.Errorf("%s: %w", d, ErrNoParts)
	}
	m, err := mergeManifests(parts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d, err)
	}
	for _, s := range m.Shards {
		if opts.Verify {
			err = d.Check(ctx, s.File, s.Bytes, s.SHA256)
		} else if size, serr := d.Stat(ctx, s.File); serr != nil {
			err = serr
		} else if size != s.Bytes {
			err = fmt.Errorf("%s: %d bytes, its part manifest says %d", d.Join(s.File), size, s.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("merge: shard %w", err)
		}
	}
	b, err := m.encode()
	if err != nil {
		return nil, err
	}
	if hasManifest {
		// A merge that stopped after writing manifest.json: finish it only
		// if it wrote this very manifest.
		old, err := d.ReadFile(ctx, ManifestName)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(old, b) {
			return nil, fmt.Errorf("%s: %s exists and differs from the merge of the parts: choose another directory", d, ManifestName)
		}
	} else if err := d.WriteFile(ctx, ManifestName, b); err != nil {
		return nil, err
	}
	for _, pm := range parts {
		if err := d.Remove(ctx, PartManifestName(pm.Layout.Part)); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// mergeManifests checks that parts tile one conversion and joins them.
func mergeManifests(parts []*PartManifest) (*Manifest, error) {
	sort.Slice(parts, func(a, b int) bool {
		pa, pb := parts[a].Layout.Part, parts[b].Layout.Part
		if pa.Count != pb.Count {
			return pa.Count < pb.Count
		}
		return pa.Index < pb.Index
	})
	first := parts[0]
	n := first.Layout.Part.Count
	for _, pm := range parts[1:] {
		if c := pm.Layout.Part.Count; c != n {
			return nil, fmt.Errorf("parts of two conversions: part %s and part %s (one directory per conversion)", first.Layout.Part, pm.Layout.Part)
		}
	}
	have := make([]bool, n)
	for _, pm := range parts {
		have[pm.Layout.Part.Index] = true
	}
	var missing []string
	for i, ok := range have {
		if !ok {
			missing = append(missing, Part{Index: i, Count: n}.String())
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %d of %d parts have no part manifest yet (%s): wait for them, or rerun them with --resume", ErrMissingParts, len(missing), n, strings.Join(missing, ", "))
	}
	m := &Manifest{
		FormatVersion: first.FormatVersion,
		Source:        first.Source,
		Categories:    first.Categories,
		ShardBytes:    first.ShardBytes,
		RowGroupBytes: first.RowGroupBytes,
		Pixels:        first.Pixels,
		Shards:        []ShardInfo{},
		Skipped:       first.Skipped,
	}
	var nextShard int
	var nextRow int64
	for _, pm := range parts {
		p, l := pm.Layout.Part, &pm.Layout
		differ := func(what string) error {
			return fmt.Errorf("part %s and part %s have different %s: they are not parts of one conversion", first.Layout.Part, p, what)
		}
		switch {
		case pm.FormatVersion != first.FormatVersion:
			return nil, differ("format versions")
		case !reflect.DeepEqual(pm.Source, first.Source):
			return nil, differ("sources")
		case !reflect.DeepEqual(pm.Categories, first.Categories):
			return nil, differ("categories")
		case pm.ShardBytes != first.ShardBytes || pm.RowGroupBytes != first.RowGroupBytes:
			return nil, differ("--shard-size or row-group targets")
		case !reflect.DeepEqual(pm.Pixels, first.Pixels):
			return nil, differ("pixels (--pixels or --max-side)")
		case !reflect.DeepEqual(pm.Skipped, first.Skipped):
			return nil, differ("skip counts (the source changed between parts)")
		case l.TotalShards != first.Layout.TotalShards || l.TotalRows != first.Layout.TotalRows:
			return nil, differ("plans (the source changed between parts)")
		}
		if l.FirstRow < nextRow || l.FirstShard < nextShard {
			return nil, fmt.Errorf("part %s overlaps the part before it: it starts at row %d, shard %d, the parts before end at row %d, shard %d", p, l.FirstRow, l.FirstShard, nextRow, nextShard)
		}
		if l.FirstRow > nextRow || l.FirstShard > nextShard {
			return nil, fmt.Errorf("part %s leaves a gap: it starts at row %d, shard %d, the parts before end at row %d, shard %d", p, l.FirstRow, l.FirstShard, nextRow, nextShard)
		}
		nextRow += pm.Rows
		nextShard += len(pm.Shards)
		m.Shards = append(m.Shards, pm.Shards...)
		m.Rows += pm.Rows
		m.Instances += pm.Instances
		m.Bytes += pm.Bytes
	}
	if nextShard != first.Layout.TotalShards || nextRow != first.Layout.TotalRows {
		return nil, fmt.Errorf("parts hold %d shards and %d rows, the plan %d and %d", nextShard, nextRow, first.Layout.TotalShards, first.Layout.TotalRows)
	}
	if m.Skipped == nil {
		m.Skipped = map[string]int64{}
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}
