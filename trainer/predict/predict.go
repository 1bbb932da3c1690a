package predict

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	_ "image/jpeg" // decoders for the source images
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/atomicfile"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// Options configure Run. Zero values take the documented defaults.
type Options struct {
	Imgsz  int     // letterbox side, default 640
	Conf   float32 // keep detections with score > Conf, default 0.25
	MaxDet int     // detections per image before Conf, default 300
	Batch  int     // images per forward, default 4
	// Workers decode and letterbox in parallel; 0 = GOMAXPROCS.
	Workers int
	// Categories maps class index → dataset category (id and name); nil
	// writes category_id = class index + 1.
	Categories []shard.Category
	// ImageIDs maps a source file's base name to its dataset image id
	// (from a COCO annotations file). Files not in it take the number in
	// their name (000000000139.jpg → 139), else their 1-based position.
	ImageIDs map[string]int64
	// DrawConf is the score a detection needs to be drawn (default
	// max(Conf, 0.25)); NoDraw skips the PNGs.
	DrawConf float32
	NoDraw   bool
}

func (o Options) withDefaults() Options {
	if o.Imgsz == 0 {
		o.Imgsz = 640
	}
	if o.Conf == 0 {
		o.Conf = 0.25
	}
	if o.MaxDet == 0 {
		o.MaxDet = 300
	}
	if o.Batch == 0 {
		o.Batch = 4
	}
	if o.DrawConf == 0 {
		o.DrawConf = max(o.Conf, 0.25)
	}
	return o
}

// Result is one COCO detection result.
type Result struct {
	ImageID      int64        `json:"image_id"`
	CategoryID   int64        `json:"category_id"`
	Bbox         [4]float64   `json:"bbox"`
	Score        float64      `json:"score"`
	Segmentation Segmentation `json:"segmentation"`
}

// Segmentation is a compressed COCO RLE.
type Segmentation struct {
	Size   [2]int `json:"size"` // [h, w]
	Counts string `json:"counts"`
}

// Summary counts what Run did.
type Summary struct {
	Images, Detections int
	ResultsPath        string
}

// Sources lists the images of path: the file itself, or the .jpg, .jpeg
// and .png files of a directory in name order.
func Sources(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".jpg", ".jpeg", ".png":
			if !e.IsDir() {
				out = append(out, filepath.Join(path, e.Name()))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no .jpg, .jpeg or .png images", path)
	}
	return out, nil
}

func imageID(name string, i int, ids map[string]int64) int64 {
	if id, ok := ids[filepath.Base(name)]; ok {
		return id
	}
	stem := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	if id, err := strconv.ParseInt(stem, 10, 64); err == nil {
		return id
	}
	return int64(i + 1)
}

// Run letterboxes files, runs m in eval mode, writes outDir/results.json
// and (unless NoDraw) one PNG per image with boxes and translucent masks.
func Run(ctx context.Context, m *model.Model, files []string, outDir string, opt Options) (Summary, error) {
	opt = opt.withDefaults()
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Summary{}, err
	}
	rows := make([]shard.Image, len(files))
	byID := map[int64]string{}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return Summary{}, err
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			return Summary{}, fmt.Errorf("%s: %w", f, err)
		}
		id := imageID(f, i, opt.ImageIDs)
		if prev, dup := byID[id]; dup {
			return Summary{}, fmt.Errorf("%s and %s both map to image id %d", prev, f, id)
		}
		byID[id] = f
		rows[i] = shard.Image{ImageID: id, FileName: f, Width: int32(cfg.Width), Height: int32(cfg.Height), Format: format, Bytes: b}
	}
	aug := augment.DefaultConfig()
	aug.ImgSz = opt.Imgsz
	ld, err := pipeline.New(ctx, &pipeline.SliceSource{Rows: rows}, pipeline.Config{
		BatchSize: opt.Batch, Workers: opt.Workers, Val: true, Augment: aug, Strict: true,
	})
	if err != nil {
		return Summary{}, err
	}
	defer ld.Close()
	var results []Result
	sum := Summary{}
	for {
		rec, err := ld.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, err
		}
		dets, protos, err := Infer(m, rec, opt.MaxDet)
		if err != nil {
			rec.Release()
			return sum, err
		}
		info, err := ReadImageInfo(rec)
		rec.Release()
		if err != nil {
			return sum, err
		}
		for i := range info {
			d := Filter(dets[i], opt.Conf)
			inf := info[i]
			res, masks, err := nativeResults(d, protos[i], inf, opt)
			if err != nil {
				return sum, fmt.Errorf("%s: %w", byID[inf.ID], err)
			}
			results = append(results, res...)
			sum.Images++
			sum.Detections += len(res)
			if !opt.NoDraw {
				if err := drawImage(byID[inf.ID], filepath.Join(outDir, strings.TrimSuffix(filepath.Base(byID[inf.ID]), filepath.Ext(byID[inf.ID]))+".png"), res, masks, opt); err != nil {
					return sum, err
				}
			}
		}
	}
	if results == nil {
		results = []Result{}
	}
	b, err := json.Marshal(results)
	if err != nil {
		return sum, err
	}
	sum.ResultsPath = filepath.Join(outDir, "results.json")
	return sum, atomicfile.WriteFile(sum.ResultsPath, b, 0o644)
}

// ImageInfo is what post-processing needs from a batch row: the row's
// provenance as the batch holds it (its Transform maps original pixels to
// canvas pixels) and the prototype grid.
type ImageInfo struct {
	batch.Image
	Hp, Wp int
	Stride float32
}

// ReadImageInfo reads image ids, original sizes and transforms of a batch.
func ReadImageInfo(rec arrow.RecordBatch) ([]ImageInfo, error) {
	rows, err := batch.ImagesOf(rec)
	if err != nil {
		return nil, err
	}
	ms, err := batch.MaskStack(rec)
	if err != nil {
		return nil, err
	}
	img, err := batch.ImageTensor(rec)
	if err != nil {
		return nil, err
	}
	hp, wp := ms.Shape[0], ms.Shape[1]
	out := make([]ImageInfo, len(rows))
	for i, r := range rows {
		out[i] = ImageInfo{Image: r, Hp: hp, Wp: wp, Stride: float32(img.Shape[1]) / float32(hp)}
	}
	return out, nil
}

// Infer runs m in eval mode on a batch record and decodes the one-to-one
// outputs: per image the top maxDet detections and the [nm, hp, wp]
// prototypes (host copies). The model runs on its own backend: the uint8
// images go up, detections and prototypes come down.
func Infer(m *model.Model, rec arrow.RecordBatch, maxDet int) ([][]model.Detection, [][]float32, error) {
	img, err := batch.ImageTensor(rec)
	if err != nil {
		return nil, nil, err
	}
	x := tensor.UploadBytes(m.Backend(), img.Data, 1.0/255, img.Count, img.Shape[0], img.Shape[1], img.Shape[2])
	out, err := m.Forward(nil, x, model.Eval)
	if err != nil {
		return nil, nil, err
	}
	dets, err := model.Decode(out, maxDet)
	if err != nil {
		return nil, nil, err
	}
	per := out.Proto.Shape[1] * out.Proto.Shape[2] * out.Proto.Shape[3]
	proto := out.Proto.ToHost(nil)
	protos := make([][]float32, img.Count)
	for i := range protos {
		protos[i] = proto[i*per : (i+1)*per]
	}
	return dets, protos, nil
}

// nativeResults maps detections to the original image: boxes through the
// inverse letterbox, masks by bilinear sampling of the logit grid.
func nativeResults(dets []model.Detection, proto []float32, inf ImageInfo, opt Options) ([]Result, [][]byte, error) {
	a := geom.Affine(inf.Transform)
	back, ok := a.Invert()
	if !ok {
		return nil, nil, fmt.Errorf("image %d: singular transform %v", inf.ID, inf.Transform)
	}
	inv := back.Apply
	H, W, hp, wp, s := inf.OrigH, inf.OrigW, inf.Hp, inf.Wp, float64(inf.Stride)
	logit := make([]float32, hp*wp)
	var res []Result
	var masks [][]byte
	for _, d := range dets {
		x1, y1 := inv(float64(d.Box[0]), float64(d.Box[1]))
		x2, y2 := inv(float64(d.Box[2]), float64(d.Box[3]))
		x1, x2 = min(x1, x2), max(x1, x2)
		y1, y2 = min(y1, y2), max(y1, y2)
		x1, y1 = math.Max(0, math.Min(x1, float64(W))), math.Max(0, math.Min(y1, float64(H)))
		x2, y2 = math.Max(0, math.Min(x2, float64(W))), math.Max(0, math.Min(y2, float64(H)))
		cat := int64(d.Class + 1)
		if opt.Categories != nil {
			if d.Class >= len(opt.Categories) {
				return nil, nil, fmt.Errorf("class %d outside the %d-entry category table", d.Class, len(opt.Categories))
			}
			cat = int64(opt.Categories[d.Class].ID)
		}
		// Logits over the cells the box touches, one cell of margin for
		// the bilinear footprint.
		r0 := max(int(math.Floor(float64(d.Box[1])/s))-1, 0)
		r1 := min(int(math.Ceil(float64(d.Box[3])/s))+1, hp)
		c0 := max(int(math.Floor(float64(d.Box[0])/s))-1, 0)
		c1 := min(int(math.Ceil(float64(d.Box[2])/s))+1, wp)
		mask := make([]byte, H*W)
		if r0 < r1 && c0 < c1 {
			Logits(logit, d.Coeffs, proto, hp, wp, r0, r1, c0, c1)
			px0, px1 := int(math.Floor(x1)), int(math.Ceil(x2))
			py0, py1 := int(math.Floor(y1)), int(math.Ceil(y2))
			for y := py0; y < min(py1, H); y++ {
				cy := float64(y) + 0.5
				if cy < y1 || cy >= y2 {
					continue
				}
				for x := px0; x < min(px1, W); x++ {
					cx := float64(x) + 0.5
					if cx < x1 || cx >= x2 {
						continue
					}
					u, v := a.Apply(cx, cy)
					if bilinear(logit, wp, r0, r1, c0, c1, u/s-0.5, v/s-0.5) > 0 {
						mask[y*W+x] = 1
					}
				}
			}
		}
		r, err := rle.FromMask(mask, H, W)
		if err != nil {
			return nil, nil, err
		}
		res = append(res, Result{ImageID: inf.ID, CategoryID: cat, Score: float64(d.Score),
			Bbox:         [4]float64{round3(x1), round3(y1), round3(x2 - x1), round3(y2 - y1)},
			Segmentation: Segmentation{Size: [2]int{H, W}, Counts: r.String()}})
		masks = append(masks, mask)
	}
	return res, masks, nil
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// bilinear samples g (row stride wp) at grid coordinates (gx, gy), clamped
// to the computed cells [r0, r1) × [c0, c1).
func bilinear(g []float32, wp, r0, r1, c0, c1 int, gx, gy float64) float32 {
	gx = math.Max(float64(c0), math.Min(gx, float64(c1-1)))
	gy = math.Max(float64(r0), math.Min(gy, float64(r1-1)))
	x0, y0 := int(gx), int(gy)
	x1, y1 := min(x0+1, c1-1), min(y0+1, r1-1)
	fx, fy := float32(gx-float64(x0)), float32(gy-float64(y0))
	top := g[y0*wp+x0]*(1-fx) + g[y0*wp+x1]*fx
	bot := g[y1*wp+x0]*(1-fx) + g[y1*wp+x1]*fx
	return top*(1-fy) + bot*fy
}

var palette = []color.RGBA{
	{255, 56, 56, 255}, {255, 157, 151, 255}, {255, 112, 31, 255}, {255, 178, 29, 255}, {207, 210, 49, 255},
	{72, 249, 10, 255}, {146, 204, 23, 255}, {61, 219, 134, 255}, {26, 147, 52, 255}, {0, 212, 187, 255},
	{44, 153, 168, 255}, {0, 194, 255, 255}, {52, 69, 147, 255}, {100, 115, 255, 255}, {0, 24, 236, 255},
	{132, 56, 255, 255}, {82, 0, 133, 255}, {203, 56, 255, 255}, {255, 149, 200, 255}, {255, 55, 199, 255},
}

func drawImage(src, dst string, res []Result, masks [][]byte, opt Options) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	im, _, err := image.Decode(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	b := im.Bounds()
	canvas := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(canvas, canvas.Bounds(), im, b.Min, draw.Src)
	W := b.Dx()
	for k := len(res) - 1; k >= 0; k-- { // best drawn last, on top
		r := res[k]
		if float32(r.Score) < opt.DrawConf {
			continue
		}
		c := palette[int(r.CategoryID)%len(palette)]
		for i, v := range masks[k] {
			if v == 0 {
				continue
			}
			p := canvas.Pix[(i/W)*canvas.Stride+(i%W)*4:]
			p[0] = uint8((uint16(p[0])*3 + uint16(c.R)*2) / 5)
			p[1] = uint8((uint16(p[1])*3 + uint16(c.G)*2) / 5)
			p[2] = uint8((uint16(p[2])*3 + uint16(c.B)*2) / 5)
		}
		x0, y0 := int(r.Bbox[0]), int(r.Bbox[1])
		x1, y1 := int(r.Bbox[0]+r.Bbox[2]), int(r.Bbox[1]+r.Bbox[3])
		rect(canvas, x0, y0, x1, y1, c)
		name := strconv.FormatInt(r.CategoryID, 10)
		for _, cat := range opt.Categories {
			if int64(cat.ID) == r.CategoryID {
				name = cat.Name
			}
		}
		label(canvas, x0, y0, fmt.Sprintf("%s %.2f", name, r.Score), c)
	}
	// A run stopped mid-write leaves the last complete picture, not a
	// truncated PNG under the final name.
	out, err := atomicfile.Create(dst, 0o644)
	if err != nil {
		return err
	}
	defer out.Abort()
	w := bufio.NewWriter(out)
	if err := png.Encode(w, canvas); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	return out.Commit()
}

func rect(im *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	for t := 0; t < 2; t++ {
		for x := x0; x <= x1; x++ {
			im.SetRGBA(x, y0+t, c)
			im.SetRGBA(x, y1-t, c)
		}
		for y := y0; y <= y1; y++ {
			im.SetRGBA(x0+t, y, c)
			im.SetRGBA(x1-t, y, c)
		}
	}
}

func label(im *image.RGBA, x, y int, s string, c color.RGBA) {
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	top := max(y-14, 0)
	draw.Draw(im, image.Rect(x, top, x+w+4, top+14), &image.Uniform{c}, image.Point{}, draw.Src)
	d := font.Drawer{Dst: im, Src: image.White, Face: face, Dot: fixed.P(x+2, top+11)}
	d.DrawString(s)
}
