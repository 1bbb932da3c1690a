package yolo

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/internal/arena"
	"github.com/segpipe/segpipe/formats/shard"
)

// Options configure Open. The zero value is the default policy.
type Options struct {
	// Strict turns the first bad-input problem into Open's error.
	Strict bool
	// Workers is the number of goroutines reading image files (headers in
	// Open, whole files in Images). <= 0 means GOMAXPROCS.
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

// Dataset is one split of an Ultralytics YOLO segmentation dataset, its
// labels held in memory in compact form.
type Dataset struct {
	root string
	arena.Dataset
	stats Stats
}

// Stats describe the split as found on disk.
type Stats struct {
	Images      int // image files listed for the split
	Backgrounds int // images without a label file, or with an empty one (kept, zero instances)
	Lines       int // non-blank label lines
}

// imageExts are the extensions listed as images. Only JPEG and PNG can be
// stored; files with the other extensions Ultralytics accepts are skipped
// and counted as unsupported_image_format.
var imageExts = map[string]bool{".jpg": true, ".jpeg": true, ".png": true}

var otherImageExts = map[string]bool{".bmp": true, ".dng": true, ".mpo": true, ".tif": true, ".tiff": true,
	".webp": true, ".pfm": true, ".heic": true, ".gif": true}

// ReasonUnsupportedImageFormat counts image files of a format a shard
// cannot hold (only JPEG and PNG are stored untouched).
const ReasonUnsupportedImageFormat = "unsupported_image_format"

// ReasonLabelFileTooLarge counts images whose label file is over
// MaxLabelBytes; the file is not read.
const ReasonLabelFileTooLarge = "label_file_too_large"

// MaxLabelBytes bounds a label file's size, checked before it is read
// whole. shard.MaxInstances polygons of 800 points each, at about 20 bytes
// a point, fit in it; a larger file holds more instances than an image may
// keep, or lines no annotation tool writes.
const MaxLabelBytes = 32 << 20

// Open reads dataYAMLPath and the given split ("train", "val" or any other
// key of data.yaml naming image directories or list files), checks every
// image header and parses every label file.
func Open(dataYAMLPath string, split string, opts Options) (*Dataset, error) {
	raw, err := os.ReadFile(dataYAMLPath)
	if err != nil {
		return nil, fmt.Errorf("yolo: %w", err)
	}
	cfg, err := parseDataYAML(string(raw))
	if err != nil {
		return nil, fmt.Errorf("yolo: %s: %w", dataYAMLPath, err)
	}
	cats, err := categories(cfg)
	if err != nil {
		return nil, fmt.Errorf("yolo: %s: %w", dataYAMLPath, err)
	}
	root := filepath.Dir(dataYAMLPath)
	if p, ok := cfg["path"]; ok && p.scalar != "" {
		if filepath.IsAbs(p.scalar) {
			root = p.scalar
		} else {
			root = filepath.Join(root, p.scalar)
		}
	}
	sv, ok := cfg[split]
	if !ok {
		return nil, fmt.Errorf("yolo: %s: no %q key (the split's image directory)", dataYAMLPath, split)
	}
	sources := sv.list
	if !sv.isList {
		sources = []string{sv.scalar}
	}
	rep := &datasets.Report{Logger: opts.Logger}
	d := &Dataset{root: root, Dataset: arena.Dataset{Cats: cats, Rep: rep}}
	l := &loader{root: root, strict: opts.Strict, rep: rep, classOf: map[int32]int32{}, lim: arena.Limits{MaxPixels: opts.MaxPixels}}
	for _, c := range cats {
		l.classOf[c.ID] = c.Index
	}
	paths, err := l.list(sources, dataYAMLPath)
	if err != nil {
		return nil, err
	}
	if err := l.load(paths, opts.Workers, d); err != nil {
		return nil, err
	}
	d.Src.Pixels = opts.Pixels
	return d, nil
}

// Stats describe the split as found on disk.
func (d *Dataset) Stats() Stats { return d.stats }

// Images calls fn for every image in order of its path relative to the
// dataset root (image ids are 1-based positions in that order, counting
// skipped images too), from the start-th emitted image on. The contract
// is that of coco.Dataset.Images: fn must not retain the *shard.Image or
// anything reachable from it after returning, files are read in parallel
// but fn is called in order on the calling goroutine, and a file changed
// since Open is an error.
func (d *Dataset) Images(ctx context.Context, start int, fn func(*shard.Image) error) error {
	return d.Src.Each(ctx, start, fn)
}

// categories builds the category table from names (a list: ids 0..n-1,
// or a map id → name) and checks nc when present.
func categories(cfg map[string]*yamlValue) ([]shard.Category, error) {
	nv, ok := cfg["names"]
	if !ok {
		return nil, errors.New("no names")
	}
	var cats []shard.Category
	switch {
	case nv.isList:
		for i, n := range nv.list {
			cats = append(cats, shard.Category{ID: int32(i), Name: n})
		}
	case nv.isMap:
		for _, k := range nv.keys {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 {
				return nil, fmt.Errorf("line %d: names key %q is not a class number", nv.line, k)
			}
			cats = append(cats, shard.Category{ID: int32(id), Name: nv.m[k]})
		}
	default:
		return nil, fmt.Errorf("line %d: names must be a list or a map", nv.line)
	}
	if len(cats) == 0 {
		return nil, fmt.Errorf("line %d: names is empty", nv.line)
	}
	slices.SortFunc(cats, func(a, b shard.Category) int { return cmp.Compare(a.ID, b.ID) })
	for i := range cats {
		if i > 0 && cats[i].ID == cats[i-1].ID {
			return nil, fmt.Errorf("line %d: class %d named twice", nv.line, cats[i].ID)
		}
		cats[i].Index = int32(i)
	}
	if nc, ok := cfg["nc"]; ok {
		if n, err := strconv.Atoi(nc.scalar); err != nil || n != len(cats) {
			return nil, fmt.Errorf("line %d: nc %q disagrees with %d names", nc.line, nc.scalar, len(cats))
		}
	}
	return cats, nil
}

// loader holds the state of one Open.
type loader struct {
	root    string
	strict  bool
	rep     *datasets.Report
	classOf map[int32]int32
	store   arena.Store
	lim     arena.Limits
}

// list expands the split's sources (directories searched recursively, or
// .txt files listing image paths) into sorted image paths relative to the
// root.
func (l *loader) list(sources []string, yamlPath string) ([]string, error) {
	seen := map[string]bool{}
	var rels []string
	add := func(abs string) error {
		rel, err := filepath.Rel(l.root, abs)
		if err != nil || !filepath.IsLocal(rel) {
			return fmt.Errorf("yolo: image %s is outside the dataset root %s", abs, l.root)
		}
		rel = filepath.ToSlash(rel)
		if !seen[rel] {
			seen[rel] = true
			rels = append(rels, rel)
		}
		return nil
	}
	for _, src := range sources {
		p := src
		if !filepath.IsAbs(p) {
			p = filepath.Join(l.root, p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("yolo: %s: split source: %w", yamlPath, err)
		}
		if st.IsDir() {
			// A trailing separator makes WalkDir enter a split directory
			// that is a symbolic link (WalkDir does not follow links, its
			// root included); paths below it keep the link's name.
			n := len(rels)
			err = filepath.WalkDir(p+string(filepath.Separator), func(path string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				ext := strings.ToLower(filepath.Ext(path))
				if !imageExts[ext] && !otherImageExts[ext] {
					return nil
				}
				// Image files linked into a dataset (a common way to
				// assemble one, and what Ultralytics' glob reads) count
				// as the files they name; linked directories are not
				// entered, so a link cycle cannot loop.
				if e.Type()&fs.ModeSymlink != 0 {
					if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
						return nil
					}
				} else if !e.Type().IsRegular() {
					return nil
				}
				return add(path)
			})
			if err != nil {
				return nil, fmt.Errorf("yolo: listing %s: %w", p, err)
			}
			if len(rels) == n {
				return nil, fmt.Errorf("yolo: %s: split source %s: %w (%s)", yamlPath, p, datasets.ErrImagesNotFound, extList())
			}
			continue
		}
		// A list file: one image path a line, relative to the root.
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("yolo: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			ip := filepath.FromSlash(line)
			if !filepath.IsAbs(ip) {
				ip = filepath.Join(l.root, ip)
			}
			if err := add(ip); err != nil {
				f.Close()
				return nil, err
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("yolo: reading %s: %w", p, err)
		}
	}
	slices.Sort(rels)
	return rels, nil
}

// labelPath maps an image path to its label file the Ultralytics way: the
// last "images" directory becomes "labels" and the extension ".txt".
func labelPath(root, rel string) (string, bool) {
	parts := strings.Split(rel, "/")
	for i := len(parts) - 2; i >= 0; i-- {
		if parts[i] == "images" {
			parts[i] = "labels"
			last := parts[len(parts)-1]
			parts[len(parts)-1] = strings.TrimSuffix(last, filepath.Ext(last)) + ".txt"
			return filepath.Join(root, filepath.FromSlash(strings.Join(parts, "/"))), true
		}
	}
	return "", false
}

func (l *loader) problem(pr *datasets.Problem) error { return l.rep.Handle(l.strict, pr) }

// fileInfo is what a worker reads for one image: its header and label file.
type fileInfo struct {
	hdr       arena.Header
	herr      error
	labelPath string
	label     []byte
	lerr      error
	labelSize int64 // when over MaxLabelBytes (label unread), else 0
	noImages  bool  // the path has no "images" directory
}

// load reads headers and label files in parallel and parses the labels in
// path order, laying out the rows.
func (l *loader) load(rels []string, workers int, d *Dataset) error {
	d.stats.Images = len(rels)
	st := &l.store
	var entries []arena.Entry
	var order []uint32
	var missing int
	var firstMissing []string
	read := func(i int) fileInfo {
		var fi fileInfo
		if otherImageExts[strings.ToLower(filepath.Ext(rels[i]))] {
			return fi
		}
		fi.hdr, fi.herr = arena.ReadHeader(filepath.Join(l.root, filepath.FromSlash(rels[i])), l.lim)
		if fi.herr != nil {
			return fi
		}
		lp, ok := labelPath(l.root, rels[i])
		if !ok {
			fi.noImages = true
			return fi
		}
		fi.labelPath = lp
		fi.label, fi.labelSize, fi.lerr = readLabel(lp)
		return fi
	}
	err := arena.Ordered(context.Background(), len(rels), workers, read, func(i int, fi fileInfo) error {
		rel := rels[i]
		path := filepath.Join(l.root, filepath.FromSlash(rel))
		id := int64(i + 1)
		pr := &datasets.Problem{File: path, Offset: -1, ImageID: id, AnnID: -1}
		if otherImageExts[strings.ToLower(filepath.Ext(rel))] {
			pr.Reason, pr.Detail = ReasonUnsupportedImageFormat, "only JPEG and PNG can be stored untouched"
		} else if fi.herr != nil {
			var he *arena.HeaderError
			pr.Reason, pr.Detail = datasets.ReasonCorruptImage, fi.herr.Error()
			if errors.As(fi.herr, &he) {
				pr.Reason = he.Reason()
			}
			if pr.Reason == datasets.ReasonMissingImageFile {
				if missing++; len(firstMissing) < 3 {
					firstMissing = append(firstMissing, path)
				}
			}
		} else if fi.labelSize > 0 {
			pr.File, pr.Reason = fi.labelPath, ReasonLabelFileTooLarge
			pr.Detail = fmt.Sprintf("%d bytes, over the limit of %d", fi.labelSize, MaxLabelBytes)
		}
		if pr.Reason != "" {
			return l.problem(pr)
		}
		if fi.noImages {
			return fmt.Errorf("yolo: image %s has no \"images\" directory in its path, so its label file cannot be located", rel)
		}
		if fi.lerr != nil {
			return fmt.Errorf("yolo: %w", fi.lerr)
		}
		lo, mark := uint32(len(st.Anns)), st.Mark()
		lines, err := parseLabels(fi.labelPath, fi.label, fi.hdr.Width, fi.hdr.Height, id, l.classOf, st, l.problem)
		if errors.Is(err, errTooManyInstances) {
			// Nothing of the image is kept: its instances so far are
			// rolled back, and it is skipped whole.
			st.Anns = st.Anns[:lo]
			st.Rollback(mark)
			return l.problem(&datasets.Problem{File: fi.labelPath, Offset: -1, ImageID: id, AnnID: -1,
				Reason: datasets.ReasonTooManyInstances, Detail: err.Error()})
		}
		if err != nil {
			return err
		}
		d.stats.Lines += lines
		hi := uint32(len(st.Anns))
		if hi == lo && lines == 0 {
			d.stats.Backgrounds++
		}
		e := arena.Entry{ID: id, FileName: rel, Path: path, Width: fi.hdr.Width, Height: fi.hdr.Height,
			Format: fi.hdr.Format, Size: fi.hdr.Size, AnnLo: uint32(len(order))}
		for a := lo; a < hi; a++ {
			st.Anns[a].ID = int64(a) + 1
			order = append(order, a)
		}
		e.AnnHi = uint32(len(order))
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return err
	}
	// Images listed (in a list file) but mostly absent: the wrong root or
	// split, not a few lost files.
	if err := datasets.CheckMissing(l.root, len(rels), missing, firstMissing); err != nil {
		return fmt.Errorf("yolo: %w", err)
	}
	d.Src = &arena.Source{Images: entries, Order: order, Store: st, Workers: workers}
	return nil
}

// readLabel reads a label file, refusing one over MaxLabelBytes before
// reading it (its size is returned, the data nil). A missing file is a
// background image: nil data, no error.
func readLabel(path string) ([]byte, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if st.Size() > MaxLabelBytes {
		return nil, st.Size(), nil
	}
	// A file that grew since Stat is still read no further than the bound.
	data, err := io.ReadAll(io.LimitReader(f, MaxLabelBytes+1))
	if err == nil && len(data) > MaxLabelBytes {
		return nil, int64(len(data)), nil
	}
	return data, 0, err
}

// errTooManyInstances stops parseLabels at the instance past
// shard.MaxInstances: the image is skipped whole.
var errTooManyInstances = errors.New("too many instances")

// parseLabels parses one label file of an image of w×h pixels, appending
// its instances to st and reporting bad lines through problem. It returns
// the number of non-blank lines. At the instance past shard.MaxInstances it
// stops with an error wrapping errTooManyInstances, so no more than that
// many are ever stored for one image; the caller rolls back what was.
//
// A line is "cls x1 y1 x2 y2 …" (a polygon of at least 3 points) or
// "cls cx cy w h" (a box), all coordinates normalised to [0, 1] by the
// image size. Coordinates become float32(v·size) pixels, as in COCO.
func parseLabels(file string, data []byte, w, h int32, imageID int64, classOf map[int32]int32,
	st *arena.Store, problem func(*datasets.Problem) error) (int, error) {
	lines, kept := 0, 0
	var vals []float64
	for ln := 1; len(data) > 0; ln++ {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			continue
		}
		lines++
		bad := func(reason, detail string) error {
			return problem(&datasets.Problem{File: file, Offset: -1, Line: ln, ImageID: imageID, AnnID: -1,
				Reason: reason, Detail: detail})
		}
		cls, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || cls != math.Trunc(cls) || cls < 0 || cls > math.MaxInt32 {
			if err := bad(datasets.ReasonInvalidLabelLine, fmt.Sprintf("class %q is not a class number", fields[0])); err != nil {
				return lines, err
			}
			continue
		}
		class, ok := classOf[int32(cls)]
		if !ok {
			if err := bad(datasets.ReasonUnknownCategoryID, fmt.Sprintf("class %d is not in names", int32(cls))); err != nil {
				return lines, err
			}
			continue
		}
		vals = vals[:0]
		var perr error
		for _, f := range fields[1:] {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				perr = bad(datasets.ReasonInvalidLabelLine, fmt.Sprintf("%q is not a number", f))
				break
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				perr = bad(datasets.ReasonNonFinite, fmt.Sprintf("%q is not finite", f))
				break
			}
			vals = append(vals, v)
		}
		if perr != nil {
			return lines, perr
		}
		if len(vals) != len(fields)-1 {
			continue // reported above
		}
		n := len(vals)
		switch {
		case n == 0:
			err = bad(datasets.ReasonInvalidLabelLine, "class without coordinates")
		case n%2 == 1:
			err = bad(datasets.ReasonPolygonOddLength, fmt.Sprintf("%d coordinates", n))
		case n == 2:
			err = bad(datasets.ReasonPolygonTooFewPoints, "1 point")
		}
		if n == 0 || n%2 == 1 || n == 2 {
			if err != nil {
				return lines, err
			}
			continue
		}
		fw, fh := float64(w), float64(h)
		a := arena.Ann{CategoryID: int32(cls), Class: class, RingLo: uint32(len(st.RingEnd))}
		if n == 4 {
			// A box: stored with its 4-corner polygon so every instance has
			// a mask, as pycocotools rasterises boxes.
			cx, cy, bw, bh := vals[0]*fw, vals[1]*fh, vals[2]*fw, vals[3]*fh
			if bw < 0 || bh < 0 {
				if err := bad(datasets.ReasonInvalidBBox, fmt.Sprintf("negative size %gx%g", vals[2], vals[3])); err != nil {
					return lines, err
				}
				continue
			}
			x0, y0, x1, y1 := float32(cx-bw/2), float32(cy-bh/2), float32(cx+bw/2), float32(cy+bh/2)
			st.Coords = append(st.Coords, x0, y0, x1, y0, x1, y1, x0, y1)
			st.CloseRing()
			a.BBox = [4]float32{x0, y0, x1 - x0, y1 - y0}
			a.Area = a.BBox[2] * a.BBox[3]
		} else {
			for i := 0; i < n; i += 2 {
				st.Coords = append(st.Coords, float32(vals[i]*fw), float32(vals[i+1]*fh))
			}
			st.CloseRing()
			a.RingHi = uint32(len(st.RingEnd))
			a.BBox = st.PolygonBBox(a.RingLo, a.RingHi)
			a.Area = float32(st.PolygonArea(a.RingLo, a.RingHi))
		}
		a.RingHi = uint32(len(st.RingEnd))
		if kept++; kept > shard.MaxInstances {
			return lines, fmt.Errorf("%w: line %d is instance %d, over the limit of %d an image", errTooManyInstances, ln, kept, shard.MaxInstances)
		}
		st.Anns = append(st.Anns, a)
	}
	return lines, nil
}

// extList names the image extensions a split directory is searched for.
func extList() string {
	var exts []string
	for e := range imageExts {
		exts = append(exts, e)
	}
	for e := range otherImageExts {
		exts = append(exts, e)
	}
	slices.Sort(exts)
	return "searched for " + strings.Join(exts, " ")
}
