package coco

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/internal/arena"
	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/formats/shard"
)

// Options configure Open. The zero value is the default policy.
type Options struct {
	// Strict turns the first bad-input problem into Open's error instead of
	// skipping and counting it.
	Strict bool
	// Workers is the number of goroutines reading image files, both for
	// the header check in Open and in Images. <= 0 means GOMAXPROCS.
	Workers int
	// Logger receives skipped-item records; nil means slog.Default().
	Logger *slog.Logger
	// Pixels, when set, makes Images emit pre-decoded rows (see
	// shard.Pixels): each image decoded, shrunk to the max side and
	// encoded by the reading goroutines, its instances in the stored
	// frame. Nil emits the files' bytes as they are.
	Pixels *shard.Pixels
	// MaxPixels bounds an image's width·height, read from its header:
	// a larger image is skipped and counted under
	// datasets.ReasonImageTooLarge. <= 0 means imagehdr.MaxPixels.
	MaxPixels int64
}

// Dataset is an opened COCO annotation file with its image directory. All
// annotations are held in memory in compact form; image files are read
// only by Images.
type Dataset struct {
	file string
	arena.Dataset
	stats Stats
}

// Stats describe what the annotation file held before anything was
// skipped.
type Stats struct {
	Images      int // entries of "images"
	Annotations int // entries of "annotations"
	Categories  int // entries of "categories"
	Bytes       int64
}

// Open parses annotationsPath (a COCO instances JSON file) and checks the
// header of every image under imagesDir. It returns an error for a file
// that cannot be read or parsed (with its byte offset) and, when
// opts.Strict is set, for the first bad item; otherwise bad items are
// skipped and counted in Report.
func Open(annotationsPath, imagesDir string, opts Options) (*Dataset, error) {
	f, err := os.Open(annotationsPath)
	if err != nil {
		return nil, fmt.Errorf("coco: %w", err)
	}
	defer f.Close()
	rep := &datasets.Report{Logger: opts.Logger}
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	p := newParser(f, annotationsPath, opts.Strict, rep, size)
	if err := p.parse(); err != nil {
		return nil, err
	}
	d := &Dataset{file: annotationsPath, Dataset: arena.Dataset{Rep: rep}, stats: p.stats}
	d.stats.Bytes = p.s.offset()
	if err := p.finish(imagesDir, opts.Workers, arena.Limits{MaxPixels: opts.MaxPixels}, d); err != nil {
		return nil, err
	}
	d.Src.Pixels = opts.Pixels
	return d, nil
}

// Stats describe the annotation file as read.
func (d *Dataset) Stats() Stats { return d.stats }

// Images calls fn for every image in ascending image id order, starting at
// the start-th (0-based; start == Len() calls nothing), so a resumed
// conversion that already wrote start rows continues where it stopped.
// Instances are in ascending annotation id order. Image files are read by
// Options.Workers goroutines ahead of fn, and fn is called on the calling
// goroutine, one image at a time.
//
// fn must not retain the *shard.Image, nor any slice reachable from it
// (Bytes, Instances, Polygons, RLE counts), after it returns: they are
// reused for later images. Copy what must outlive the call. fn may modify
// them. An error from fn or ctx stops the iteration and is returned. An
// image file that changed since Open (now missing, or with another header)
// is an error here rather than a skip, since skipping it would shift the
// row numbers that start refers to.
func (d *Dataset) Images(ctx context.Context, start int, fn func(*shard.Image) error) error {
	return d.Src.Each(ctx, start, fn)
}

// parser holds the state of one parse.
type parser struct {
	s      *scanner
	file   string
	strict bool
	rep    *datasets.Report
	stats  Stats

	sec string // section and index of the element being parsed, for at
	idx int32

	store    arena.Store
	annImage []int64 // per store.Anns: image id
	annOff   []int64 // per store.Anns: byte offset of the annotation
	annIdx   []int32 // per store.Anns: index in "annotations"

	images  []image
	imgByID map[int64]int32
	cats    []catEntry
	catSeen map[int32]bool

	notes []note // problems of the annotation being parsed
}

type image struct {
	id       int64
	fileName string
	w, h     int32
	off      int64
	idx      int32
}

type catEntry struct {
	shard.Category
	off int64
	idx int32
}

// newParser prepares a parse of r. sizeHint, the file size when known,
// presizes the arenas: COCO polygon text spends at least about 6 bytes a
// coordinate and 200 bytes an annotation, so these capacities are rarely
// exceeded, and capacity never written costs address space, not memory.
// Growing by append instead would copy the arenas repeatedly and leave
// the old copies for the collector, raising the peak well above the data.
func newParser(r io.Reader, file string, strict bool, rep *datasets.Report, sizeHint int64) *parser {
	p := &parser{
		s: newScanner(r, sizeHint), file: file, strict: strict, rep: rep,
		imgByID: make(map[int64]int32), catSeen: make(map[int32]bool),
	}
	if sizeHint > 0 && sizeHint < 1<<40 {
		anns := int(sizeHint / 200)
		p.store.Coords = make([]float32, 0, sizeHint/6)
		p.store.RingEnd = make([]uint32, 0, anns)
		p.store.Anns = make([]arena.Ann, 0, anns)
		p.annImage = make([]int64, 0, anns)
		p.annOff = make([]int64, 0, anns)
		p.annIdx = make([]int32, 0, anns)
	}
	return p
}

// syntax wraps a scanner error as the always-fatal malformed_json problem.
func (p *parser) syntax(err error) error {
	var se *syntaxError
	if errors.As(err, &se) {
		return &datasets.Problem{File: p.file, Offset: se.off, ImageID: -1, AnnID: -1,
			Reason: datasets.ReasonMalformedJSON, Detail: se.msg}
	}
	return fmt.Errorf("coco: %s: %w", p.file, err)
}

// at names a location inside the element being parsed, e.g.
// "annotations[12].bbox"; built only when a problem is found, so the parse
// itself allocates nothing per element.
func (p *parser) at(rel string) string {
	return fmt.Sprintf("%s[%d]%s", p.sec, p.idx, rel)
}

// problem applies the policy to one bad item.
func (p *parser) problem(off int64, where string, imageID, annID int64, reason, detail string) error {
	return p.rep.Handle(p.strict, &datasets.Problem{File: p.file, Offset: off, Where: where,
		ImageID: imageID, AnnID: annID, Reason: reason, Detail: detail})
}

func (p *parser) parse() error {
	if err := p.parseTop(); err != nil {
		var pr *datasets.Problem
		if errors.As(err, &pr) {
			return err
		}
		return p.syntax(err)
	}
	return nil
}

func (p *parser) parseTop() error {
	s := p.s
	if err := s.expect('{', "at the start of a COCO file"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for first := true; ; first = false {
		more, err := s.more('}', first, "the top-level object")
		if err != nil {
			return err
		}
		if !more {
			break
		}
		off := s.offset()
		k, err := s.key("the top-level object")
		if err != nil {
			return err
		}
		key := string(k)
		switch key {
		case "images", "annotations", "categories":
			if seen[key] {
				return s.errf(off, "key %q appears twice", key)
			}
			seen[key] = true
			if err := p.array(key); err != nil {
				return err
			}
		default:
			if err := s.skip(); err != nil {
				return err
			}
		}
	}
	if _, ok := s.peek(); ok {
		return s.errf(s.offset(), "data after the end of the top-level object")
	}
	if s.rerr != nil && !errors.Is(s.rerr, io.EOF) {
		return s.rerr
	}
	for _, k := range []string{"images", "categories"} {
		if !seen[k] {
			return &datasets.Problem{File: p.file, Offset: -1, ImageID: -1, AnnID: -1,
				Reason: datasets.ReasonMissingField, Detail: fmt.Sprintf("no %q array: not a COCO instances file", k)}
		}
	}
	return nil
}

// array parses one of the three top-level arrays.
func (p *parser) array(name string) error {
	s := p.s
	c, ok := s.peek()
	if !ok {
		return s.eofErr("expecting the " + name + " array")
	}
	if c != '[' {
		return &datasets.Problem{File: p.file, Offset: s.offset(), Where: name, ImageID: -1, AnnID: -1,
			Reason: datasets.ReasonInvalidField, Detail: fmt.Sprintf("%q is a %s, want an array", name, kindOf(c))}
	}
	s.pos++
	for i := 0; ; i++ {
		more, err := s.more(']', i == 0, name)
		if err != nil || !more {
			return err
		}
		switch name {
		case "images":
			p.stats.Images++
			err = p.image(int32(i))
		case "annotations":
			p.stats.Annotations++
			err = p.annotation(int32(i))
		default:
			p.stats.Categories++
			err = p.category(int32(i))
		}
		if err != nil {
			return err
		}
	}
}

// note is one problem found inside an element, with its location. A note
// returned by a helper skips the whole element; ring-level notes collected
// in parser.notes drop only their ring.
type note struct {
	off    int64
	where  string
	reason string
	detail string
}

// objectStart checks that an array element is an object. A non-object is
// skipped (syntax-checked) and reported through the returned note.
func (p *parser) objectStart(where string) (*note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return nil, s.eofErr("in " + where)
	}
	if c != '{' {
		if err := s.skip(); err != nil {
			return nil, err
		}
		return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: fmt.Sprintf("element is a %s, want an object", kindOf(c))}, nil
	}
	s.pos++
	return nil, nil
}

// intValue reads an integral number; a value of another type or with a
// fraction is skipped and reported in the note.
func (p *parser) intValue(where string, lo, hi int64) (int64, *note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return 0, nil, s.eofErr("in " + where)
	}
	if k := kindOf(c); k != kNumber {
		if err := s.skip(); err != nil {
			return 0, nil, err
		}
		return 0, &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: fmt.Sprintf("is a %s, want an integer", k)}, nil
	}
	v, raw, err := s.number()
	if err != nil {
		return 0, nil, err
	}
	n, ok := parseInt(raw)
	if !ok {
		// 3.0 or 1e3 are integers written as floats; accept those.
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			detail := fmt.Sprintf("%s is not an integer", raw)
			if isDecimalInt(raw) {
				detail = fmt.Sprintf("%s does not fit a 64-bit integer", raw)
			}
			return 0, &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField, detail: detail}, nil
		}
		n = int64(v)
	}
	if n < lo || n > hi {
		return 0, &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: fmt.Sprintf("%d outside [%d, %d]", n, lo, hi)}, nil
	}
	return n, nil, nil
}

// stringValue reads a string; another type is skipped and reported.
func (p *parser) stringValue(where string) (string, *note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return "", nil, s.eofErr("in " + where)
	}
	if k := kindOf(c); k != kString {
		if err := s.skip(); err != nil {
			return "", nil, err
		}
		return "", &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: fmt.Sprintf("is a %s, want a string", k)}, nil
	}
	b, err := s.str()
	return string(b), nil, err
}

// floatValue reads a number; NaN/±Inf and other types are reported.
func (p *parser) floatValue(where string) (float64, *note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return 0, nil, s.eofErr("in " + where)
	}
	if k := kindOf(c); k != kNumber {
		if err := s.skip(); err != nil {
			return 0, nil, err
		}
		return 0, &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: fmt.Sprintf("is a %s, want a number", k)}, nil
	}
	v, raw, err := s.number()
	if err != nil {
		return 0, nil, err
	}
	if math.IsNaN(v) || math.IsInf(float64(float32(v)), 0) {
		return 0, &note{off: off, where: p.at(where), reason: datasets.ReasonNonFinite,
			detail: fmt.Sprintf("%s is not a finite float32", raw)}, nil
	}
	return v, nil, nil
}

func (p *parser) image(idx int32) error {
	s := p.s
	p.sec, p.idx = "images", idx
	where := "" // relative to the element; see at
	off := s.offset()
	bad, err := p.objectStart(where)
	if err != nil {
		return err
	}
	im := image{id: -1, off: off, idx: idx}
	var have [4]bool
	if bad == nil {
		for first := true; ; first = false {
			more, err := s.more('}', first, "an image object")
			if err != nil {
				return err
			}
			if !more {
				break
			}
			k, err := s.key("an image object")
			if err != nil {
				return err
			}
			var n *note
			switch string(k) {
			case "id":
				var v int64
				v, n, err = p.intValue(".id", math.MinInt64, math.MaxInt64)
				if n == nil {
					im.id = v
				}
				have[0] = true
			case "file_name":
				im.fileName, n, err = p.stringValue(".file_name")
				have[1] = true
			case "width":
				var v int64
				v, n, err = p.intValue(".width", 1, math.MaxInt32)
				im.w = int32(v)
				have[2] = true
			case "height":
				var v int64
				v, n, err = p.intValue(".height", 1, math.MaxInt32)
				im.h = int32(v)
				have[3] = true
			default:
				err = s.skip()
			}
			if err != nil {
				return err
			}
			if n != nil && bad == nil {
				bad = n
			}
		}
		if bad == nil {
			for i, name := range []string{"id", "file_name", "width", "height"} {
				if !have[i] {
					bad = &note{off: off, where: p.at(where), reason: datasets.ReasonMissingField, detail: "no " + name}
					break
				}
			}
		}
		if bad == nil && !filepath.IsLocal(im.fileName) {
			bad = &note{off: off, where: p.at(".file_name"), reason: datasets.ReasonInvalidFileName,
				detail: fmt.Sprintf("%q is not a relative path inside the image directory", im.fileName)}
		}
		if bad == nil {
			if first, dup := p.imgByID[im.id]; dup {
				bad = &note{off: off, where: p.at(where), reason: datasets.ReasonDuplicateImageID,
					detail: fmt.Sprintf("id already used by images[%d]", p.images[first].idx)}
			}
		}
	}
	if bad != nil {
		return p.problem(bad.off, bad.where, im.id, -1, bad.reason, bad.detail)
	}
	p.imgByID[im.id] = int32(len(p.images))
	p.images = append(p.images, im)
	return nil
}

func (p *parser) category(idx int32) error {
	s := p.s
	p.sec, p.idx = "categories", idx
	where := "" // relative to the element; see at
	off := s.offset()
	bad, err := p.objectStart(where)
	if err != nil {
		return err
	}
	c := catEntry{off: off, idx: idx}
	var haveID, haveName bool
	if bad == nil {
		for first := true; ; first = false {
			more, err := s.more('}', first, "a category object")
			if err != nil {
				return err
			}
			if !more {
				break
			}
			k, err := s.key("a category object")
			if err != nil {
				return err
			}
			var n *note
			switch string(k) {
			case "id":
				var v int64
				v, n, err = p.intValue(".id", math.MinInt32, math.MaxInt32)
				c.ID = int32(v)
				haveID = true
			case "name":
				c.Name, n, err = p.stringValue(".name")
				haveName = true
			case "supercategory":
				c.Supercategory, n, err = p.stringValue(".supercategory")
			default:
				err = s.skip()
			}
			if err != nil {
				return err
			}
			if n != nil && bad == nil {
				bad = n
			}
		}
		switch {
		case bad != nil:
		case !haveID:
			bad = &note{off: off, where: p.at(where), reason: datasets.ReasonMissingField, detail: "no id"}
		case !haveName:
			bad = &note{off: off, where: p.at(where), reason: datasets.ReasonMissingField, detail: "no name"}
		case p.catSeen[c.ID]:
			bad = &note{off: off, where: p.at(where), reason: datasets.ReasonDuplicateCategoryID,
				detail: fmt.Sprintf("category id %d already defined", c.ID)}
		}
	}
	if bad != nil {
		return p.problem(bad.off, bad.where, -1, -1, bad.reason, bad.detail)
	}
	p.catSeen[c.ID] = true
	p.cats = append(p.cats, c)
	return nil
}

// annotation parses one annotation straight into the arenas, rolling them
// back when the annotation is skipped.
func (p *parser) annotation(idx int32) error {
	s := p.s
	st := &p.store
	p.sec, p.idx = "annotations", idx
	where := "" // relative to the element; see at
	off := s.offset()
	p.notes = p.notes[:0]
	bad, err := p.objectStart(where)
	if err != nil {
		return err
	}
	mark := st.Mark()
	a := arena.Ann{ID: -1}
	imageID := int64(-1)
	a.RingLo = uint32(len(st.RingEnd))
	a.RingHi = a.RingLo
	var have struct{ id, img, cat, seg, area, bbox bool }
	fail := func(n *note) {
		if n != nil && bad == nil {
			bad = n
		}
	}
	if bad == nil {
		for first := true; ; first = false {
			more, err := s.more('}', first, "an annotation object")
			if err != nil {
				return err
			}
			if !more {
				break
			}
			k, err := s.key("an annotation object")
			if err != nil {
				return err
			}
			var n *note
			switch string(k) {
			case "id":
				var v int64
				v, n, err = p.intValue(".id", math.MinInt64, math.MaxInt64)
				if n == nil {
					a.ID = v
				}
				have.id = true
			case "image_id":
				var v int64
				v, n, err = p.intValue(".image_id", math.MinInt64, math.MaxInt64)
				if n == nil {
					imageID = v
				}
				have.img = true
			case "category_id":
				var v int64
				v, n, err = p.intValue(".category_id", math.MinInt32, math.MaxInt32)
				a.CategoryID = int32(v)
				have.cat = true
			case "iscrowd":
				n, err = p.crowd(".iscrowd", &a)
			case "area":
				var v float64
				v, n, err = p.floatValue(".area")
				a.Area = float32(v)
				have.area = true
			case "bbox":
				n, err = p.bbox(".bbox", &a)
				have.bbox = true
			case "segmentation":
				if have.seg {
					n = &note{off: s.offset(), where: p.at(where), reason: datasets.ReasonInvalidField,
						detail: "segmentation given twice"}
					err = s.skip()
					break
				}
				n, err = p.segmentation(".segmentation", &a)
				have.seg = true
			default:
				err = s.skip()
			}
			if err != nil {
				return err
			}
			fail(n)
		}
		if bad == nil {
			for _, f := range []struct {
				ok   bool
				name string
			}{{have.id, "id"}, {have.img, "image_id"}, {have.cat, "category_id"}, {have.seg, "segmentation"}, {have.area, "area"}, {have.bbox, "bbox"}} {
				if !f.ok {
					bad = &note{off: off, where: p.at(where), reason: datasets.ReasonMissingField, detail: "no " + f.name}
					break
				}
			}
		}
	}
	if bad == nil && !a.HasRLE && a.RingHi == a.RingLo && len(p.notes) > 0 {
		// The annotation goes as a whole: one problem, naming its rings'
		// defects, not one per ring plus one for the annotation.
		var why []string
		for _, n := range p.notes {
			why = append(why, n.where+": "+n.reason+": "+n.detail)
		}
		bad = &note{off: off, where: p.at(".segmentation"), reason: datasets.ReasonNoValidPolygon,
			detail: "no ring with 3 or more points (" + strings.Join(why, "; ") + ")"}
	}
	if bad == nil {
		for _, n := range p.notes {
			if err := p.problem(n.off, n.where, imageID, a.ID, n.reason, n.detail); err != nil {
				return err
			}
		}
	}
	if bad != nil {
		st.Rollback(mark)
		return p.problem(bad.off, bad.where, imageID, a.ID, bad.reason, bad.detail)
	}
	st.Anns = append(st.Anns, a)
	p.annImage = append(p.annImage, imageID)
	p.annOff = append(p.annOff, off)
	p.annIdx = append(p.annIdx, idx)
	return nil
}

func (p *parser) crowd(where string, a *arena.Ann) (*note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return nil, s.eofErr("in " + where)
	}
	if kindOf(c) == kBool {
		v, err := s.literal()
		a.Crowd = v
		return nil, err
	}
	if kindOf(c) == kNull {
		if _, err := s.literal(); err != nil {
			return nil, err
		}
		return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
			detail: "is null, want 0 or 1"}, nil
	}
	v, n, err := p.intValue(where, 0, 1)
	if n != nil {
		n.off = off
		n.detail = "want 0 or 1: " + n.detail
	}
	a.Crowd = v == 1
	return n, err
}

func (p *parser) bbox(where string, a *arena.Ann) (*note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return nil, s.eofErr("in " + where)
	}
	if c != '[' {
		if err := s.skip(); err != nil {
			return nil, err
		}
		return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidBBox,
			detail: fmt.Sprintf("is a %s, want [x, y, w, h]", kindOf(c))}, nil
	}
	s.pos++
	var bad *note
	i := 0
	for ; ; i++ {
		more, err := s.more(']', i == 0, where)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		v, n, err := p.floatValue(where)
		if err != nil {
			return nil, err
		}
		if n != nil {
			n.where = p.at(fmt.Sprintf("%s[%d]", where, i))
		}
		if n != nil && bad == nil {
			bad = n
		}
		if i < 4 {
			a.BBox[i] = float32(v)
		}
	}
	if bad != nil {
		if bad.reason == datasets.ReasonInvalidField {
			bad.reason = datasets.ReasonInvalidBBox
		}
		return bad, nil
	}
	if i != 4 {
		return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidBBox,
			detail: fmt.Sprintf("%d numbers, want 4", i)}, nil
	}
	if a.BBox[2] < 0 || a.BBox[3] < 0 {
		return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidBBox,
			detail: fmt.Sprintf("negative size %gx%g", a.BBox[2], a.BBox[3])}, nil
	}
	return nil, nil
}

// segmentation parses polygons (a list of rings) or an RLE object.
func (p *parser) segmentation(where string, a *arena.Ann) (*note, error) {
	s := p.s
	off := s.offset()
	c, ok := s.peek()
	if !ok {
		return nil, s.eofErr("in " + where)
	}
	switch c {
	case '[':
		return p.polygons(where, a)
	case '{':
		return p.rle(where, a)
	}
	if err := s.skip(); err != nil {
		return nil, err
	}
	return &note{off: off, where: p.at(where), reason: datasets.ReasonInvalidField,
		detail: fmt.Sprintf("is a %s, want a list of polygons or an RLE object", kindOf(c))}, nil
}

func (p *parser) polygons(where string, a *arena.Ann) (*note, error) {
	s := p.s
	st := &p.store
	off := s.offset()
	s.pos++
	var bad *note
	rings := 0
	for ; ; rings++ {
		more, err := s.more(']', rings == 0, where)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		rw := func() string { return p.at(where + "[" + strconv.Itoa(rings) + "]") }
		roff := s.offset()
		c, _ := s.peek()
		if c != '[' {
			if err := s.skip(); err != nil {
				return nil, err
			}
			if bad == nil {
				bad = &note{off: roff, where: rw(), reason: datasets.ReasonInvalidField,
					detail: fmt.Sprintf("polygon is a %s, want a list of numbers", kindOf(c))}
			}
			continue
		}
		s.pos++
		c0 := len(st.Coords)
		for i := 0; ; i++ {
			more, err := s.more(']', i == 0, "a polygon")
			if err != nil {
				return nil, err
			}
			if !more {
				break
			}
			c, _ := s.peek()
			if kindOf(c) != kNumber {
				voff := s.offset()
				if err := s.skip(); err != nil {
					return nil, err
				}
				if bad == nil {
					bad = &note{off: voff, where: rw(), reason: datasets.ReasonInvalidField,
						detail: fmt.Sprintf("value %d is a %s, want a number", i, kindOf(c))}
				}
				continue
			}
			voff := s.offset()
			v, raw, err := s.number()
			if err != nil {
				return nil, err
			}
			f := float32(v)
			if math.IsNaN(v) || math.IsInf(float64(f), 0) {
				if bad == nil {
					bad = &note{off: voff, where: rw(), reason: datasets.ReasonNonFinite,
						detail: fmt.Sprintf("value %d is %s", i, raw)}
				}
				continue
			}
			st.Coords = append(st.Coords, f)
		}
		if bad != nil {
			continue
		}
		n := len(st.Coords) - c0
		switch {
		case n%2 == 1:
			bad = &note{off: roff, where: rw(), reason: datasets.ReasonPolygonOddLength,
				detail: fmt.Sprintf("%d values", n)}
		case n == 4:
			st.Coords = st.Coords[:c0]
			p.notes = append(p.notes, note{off: roff, where: rw(), reason: datasets.ReasonPolygonFourNumbers,
				detail: "ring of 4 numbers (2 points; pycocotools would read it as a box)"})
		case n < 6:
			st.Coords = st.Coords[:c0]
			p.notes = append(p.notes, note{off: roff, where: rw(), reason: datasets.ReasonPolygonTooFewPoints,
				detail: fmt.Sprintf("ring of %d points", n/2)})
		default:
			st.CloseRing()
		}
	}
	if bad != nil {
		return bad, nil
	}
	if rings == 0 {
		return &note{off: off, where: p.at(where), reason: datasets.ReasonEmptySegmentation,
			detail: "no polygons"}, nil
	}
	a.RingHi = uint32(len(st.RingEnd))
	return nil, nil
}

// rle parses {"size": [h, w], "counts": [...] | "..."} into the counts
// arena; a compressed string is decoded to canonical uncompressed counts.
func (p *parser) rle(where string, a *arena.Ann) (*note, error) {
	s := p.s
	st := &p.store
	off := s.offset()
	s.pos++
	var bad *note
	var haveSize, haveCounts bool
	lo := len(st.Counts)
	fail := func(n *note) {
		if n != nil && bad == nil {
			n.reason = datasets.ReasonInvalidRLE
			bad = n
		}
	}
	for first := true; ; first = false {
		more, err := s.more('}', first, where)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		k, err := s.key(where)
		if err != nil {
			return nil, err
		}
		switch string(k) {
		case "size":
			sw := where + ".size"
			soff := s.offset()
			if c, _ := s.peek(); c != '[' {
				if err := s.skip(); err != nil {
					return nil, err
				}
				fail(&note{off: soff, where: p.at(sw), detail: "want [h, w]"})
				continue
			}
			s.pos++
			i := 0
			for ; ; i++ {
				more, err := s.more(']', i == 0, sw)
				if err != nil {
					return nil, err
				}
				if !more {
					break
				}
				v, n, err := p.intValue(sw, 0, math.MaxInt32)
				if err != nil {
					return nil, err
				}
				fail(n)
				switch i {
				case 0:
					a.RLEH = int32(v)
				case 1:
					a.RLEW = int32(v)
				}
			}
			if i != 2 {
				fail(&note{off: soff, where: p.at(sw), detail: fmt.Sprintf("%d numbers, want [h, w]", i)})
			}
			haveSize = true
		case "counts":
			cw := where + ".counts"
			coff := s.offset()
			c, _ := s.peek()
			switch c {
			case '"':
				str, err := s.str()
				if err != nil {
					return nil, err
				}
				var derr error
				st.Counts, derr = rle.AppendDecode(st.Counts, string(str))
				if derr != nil {
					fail(&note{off: coff, where: p.at(cw), detail: derr.Error()})
				}
			case '[':
				s.pos++
				for i := 0; ; i++ {
					more, err := s.more(']', i == 0, cw)
					if err != nil {
						return nil, err
					}
					if !more {
						break
					}
					v, n, err := p.intValue(cw, 0, math.MaxUint32)
					if err != nil {
						return nil, err
					}
					fail(n)
					st.Counts = append(st.Counts, uint32(v))
				}
			default:
				if err := s.skip(); err != nil {
					return nil, err
				}
				fail(&note{off: coff, where: p.at(cw), detail: fmt.Sprintf("is a %s, want a list or a string", kindOf(c))})
			}
			haveCounts = true
		default:
			if err := s.skip(); err != nil {
				return nil, err
			}
		}
	}
	if bad == nil && (!haveSize || !haveCounts) {
		fail(&note{off: off, where: p.at(where), detail: "want both size and counts"})
	}
	if bad == nil {
		var sum uint64
		for _, c := range st.Counts[lo:] {
			sum += uint64(c)
		}
		if px := uint64(a.RLEH) * uint64(a.RLEW); sum != px {
			fail(&note{off: off, where: p.at(where), detail: fmt.Sprintf("counts sum to %d, size [%d, %d] has %d pixels", sum, a.RLEH, a.RLEW, px)})
		}
	}
	if bad != nil {
		return bad, nil
	}
	a.HasRLE = true
	a.RLELo, a.RLEHi = uint32(lo), uint32(len(st.Counts))
	return nil, nil
}

// finish checks what needs the whole file (ids across sections, image
// headers), drops what fails and lays the rest out in emission order.
func (p *parser) finish(imagesDir string, workers int, lim arena.Limits, d *Dataset) error {
	// Categories: contiguous index by ascending original id.
	slices.SortFunc(p.cats, func(a, b catEntry) int { return cmp.Compare(a.ID, b.ID) })
	classOf := make(map[int32]int32, len(p.cats))
	d.Cats = make([]shard.Category, len(p.cats))
	for i, c := range p.cats {
		c.Index = int32(i)
		d.Cats[i] = c.Category
		classOf[c.ID] = int32(i)
	}

	// Annotations, in file order: duplicate ids, unknown image/category.
	st := &p.store
	slot := make([]int32, len(st.Anns)) // image slot, -1 when dropped
	perImage := make([]uint32, len(p.images))
	seen := make(map[int64]int32, len(st.Anns))
	for i := range st.Anns {
		a := &st.Anns[i]
		slot[i] = -1
		var reason, detail string
		img, okImg := p.imgByID[p.annImage[i]]
		cls, okCat := classOf[a.CategoryID]
		if first, dup := seen[a.ID]; dup {
			reason, detail = datasets.ReasonDuplicateAnnID, fmt.Sprintf("id already used by annotations[%d]", p.annIdx[first])
		} else if !okImg {
			reason, detail = datasets.ReasonUnknownImageID, fmt.Sprintf("image_id %d is not in images", p.annImage[i])
		} else if !okCat {
			reason, detail = datasets.ReasonUnknownCategoryID, fmt.Sprintf("category_id %d is not in categories", a.CategoryID)
		} else if im := &p.images[img]; a.HasRLE && (a.RLEH != im.h || a.RLEW != im.w) {
			// A mask of another size than its image lands anywhere or
			// nowhere: a defect of the RLE like a wrong pixel count.
			reason, detail = datasets.ReasonInvalidRLE, fmt.Sprintf("segmentation size [%d, %d], the image is %dx%d (size [%d, %d])", a.RLEH, a.RLEW, im.w, im.h, im.h, im.w)
		}
		if reason != "" {
			where := fmt.Sprintf("annotations[%d]", p.annIdx[i])
			if err := p.problem(p.annOff[i], where, p.annImage[i], a.ID, reason, detail); err != nil {
				return err
			}
			continue
		}
		seen[a.ID] = int32(i)
		a.Class = cls
		slot[i] = img
		perImage[img]++
	}
	seen = nil

	// Image headers, read in parallel, judged in id order.
	order := make([]int32, len(p.images))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(p.images[a].id, p.images[b].id) })
	paths := make([]string, len(order))
	for k, i := range order {
		paths[k] = filepath.Join(imagesDir, filepath.FromSlash(p.images[i].fileName))
	}
	hdrs, herrs, err := arena.ScanHeaders(context.Background(), paths, workers, lim)
	if err != nil {
		return err
	}
	keep := make([]int32, len(p.images)) // image slot → entry index, -1 dropped
	var entries []arena.Entry
	var missing int
	var firstMissing []string
	for k, i := range order {
		im := &p.images[i]
		keep[i] = -1
		h := hdrs[k]
		var reason, detail string
		if herr := herrs[k]; herr != nil {
			var he *arena.HeaderError
			reason = datasets.ReasonCorruptImage
			if errors.As(herr, &he) {
				reason = he.Reason()
			}
			if reason == datasets.ReasonMissingImageFile {
				if missing++; len(firstMissing) < 3 {
					firstMissing = append(firstMissing, paths[k])
				}
			}
			detail = herr.Error()
		} else if h.Width != im.w || h.Height != im.h {
			reason = datasets.ReasonImageSizeMismatch
			detail = fmt.Sprintf("file is %dx%d, annotations say %dx%d", h.Width, h.Height, im.w, im.h)
		} else if perImage[i] > shard.MaxInstances {
			// Skipped whole: a partial label set would teach the model
			// that the rest is background.
			reason = datasets.ReasonTooManyInstances
			detail = fmt.Sprintf("%d instances, over the limit of %d an image", perImage[i], shard.MaxInstances)
		}
		if reason != "" {
			if perImage[i] > 0 && reason != datasets.ReasonTooManyInstances {
				detail += fmt.Sprintf(" (%d annotations refer to it)", perImage[i])
			}
			pr := &datasets.Problem{File: paths[k], Offset: -1, Where: fmt.Sprintf("images[%d] in %s", im.idx, p.file),
				ImageID: im.id, AnnID: -1, Reason: reason, Detail: detail}
			if err := p.rep.Handle(p.strict, pr); err != nil {
				return err
			}
			continue
		}
		keep[i] = int32(len(entries))
		entries = append(entries, arena.Entry{ID: im.id, FileName: im.fileName, Path: paths[k],
			Width: h.Width, Height: h.Height, Format: h.Format, Size: h.Size})
	}
	if err := datasets.CheckMissing(imagesDir, len(p.images), missing, firstMissing); err != nil {
		return fmt.Errorf("coco: %s: %w", p.file, err)
	}

	// Group annotations by entry (counting sort), then by ann id.
	var total uint32
	for i := range p.images {
		if keep[i] >= 0 {
			e := &entries[keep[i]]
			e.AnnLo = perImage[i] // count for now
			total += perImage[i]
		}
	}
	var acc uint32
	for k := range entries {
		n := entries[k].AnnLo
		entries[k].AnnLo, entries[k].AnnHi = acc, acc
		acc += n
	}
	anns := make([]uint32, total)
	for i, sl := range slot {
		if sl < 0 || keep[sl] < 0 {
			continue
		}
		e := &entries[keep[sl]]
		anns[e.AnnHi] = uint32(i)
		e.AnnHi++
	}
	for k := range entries {
		g := anns[entries[k].AnnLo:entries[k].AnnHi]
		slices.SortFunc(g, func(a, b uint32) int { return cmp.Compare(st.Anns[a].ID, st.Anns[b].ID) })
	}
	p.annImage, p.annOff, p.annIdx = nil, nil, nil
	d.Src = &arena.Source{Images: entries, Order: anns, Store: st, Workers: workers}
	return nil
}

// parseInt parses a JSON integer token (no fraction, no exponent) without
// allocating; false for anything else, including overflow.
// isDecimalInt reports whether b is integer syntax: an optional minus and
// digits only.
func isDecimalInt(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte("-"))
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}
