package pipeline

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // registers JPEG for image.Decode of unlabelled rows
	"image/png"
	"sync"

	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/augment"
	yccrow "github.com/segpipe/segpipe/pipeline/internal/ycc"
)

// DecodeImage decodes an encoded JPEG or PNG as the loader does (this
// build's JPEGDecoder, image/png) into w×h RGB pixels, in buf's memory when
// it is large enough (else a new slice). It reads the whole image as its
// header says: a caller bounds the size with formats/imagehdr first, as the
// loader and inspect --verify do.
func DecodeImage(format string, data, buf []byte) (w, h int, pix []byte, err error) {
	img, err := decodeImage(format, data, buf)
	return img.W, img.H, img.Pix, err
}

// decodeImage decodes an encoded JPEG or PNG into RGB pixels taken from
// buf when it is large enough (else a new slice).
func decodeImage(format string, data []byte, buf []byte) (augment.Image, error) {
	if len(data) == 0 {
		return augment.Image{}, errors.New("no image bytes")
	}
	var (
		im  image.Image
		err error
	)
	switch format {
	case "jpeg", "jpg":
		return decodeJPEG(data, buf)
	case "png":
		im, err = png.Decode(bytes.NewReader(data))
	default:
		im, _, err = image.Decode(bytes.NewReader(data))
	}
	if err != nil {
		return augment.Image{}, err
	}
	return fromImage(im, buf)
}

// fromImage converts a decoded image.Image to RGB pixels in buf (or a new
// slice when buf is too small).
func fromImage(im image.Image, buf []byte) (augment.Image, error) {
	b := im.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return augment.Image{}, fmt.Errorf("empty image %dx%d", w, h)
	}
	n := 3 * w * h
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	pix := buf[:n]
	toRGB(pix, im)
	return augment.Image{W: w, H: h, Pix: pix}, nil
}

// toRGB converts with fast paths for the decoders' usual outputs.
func toRGB(dst []byte, im image.Image) {
	b := im.Bounds()
	w := b.Dx()
	switch m := im.(type) {
	case *image.YCbCr:
		for y := 0; y < b.Dy(); y++ {
			yi := m.YOffset(b.Min.X, b.Min.Y+y)
			ci := m.COffset(b.Min.X, b.Min.Y+y)
			row := dst[3*w*y : 3*w*(y+1)]
			Y := m.Y[yi : yi+w]
			sub := m.SubsampleRatio
			if b.Min.X%2 != 0 && (sub == image.YCbCrSubsampleRatio420 || sub == image.YCbCrSubsampleRatio422) {
				sub = -1 // chroma pairs straddle the left edge: the general path
			}
			switch sub {
			case image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio422:
				yccrow.RowHalf(row, Y, m.Cb[ci:ci+(w+1)/2], m.Cr[ci:ci+(w+1)/2])
			case image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio440:
				yccrow.RowFull(row, Y, m.Cb[ci:ci+w], m.Cr[ci:ci+w])
			default:
				for x, yy := range Y {
					c := m.COffset(b.Min.X+x, b.Min.Y+y)
					r, g, bb := ycc(yy, m.Cb[c], m.Cr[c])
					row[3*x], row[3*x+1], row[3*x+2] = r, g, bb
				}
			}
		}
	case *image.Gray:
		for y := 0; y < b.Dy(); y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+w]
			row := dst[3*w*y:]
			for x, v := range src {
				row[3*x], row[3*x+1], row[3*x+2] = v, v, v
			}
		}
	case *image.NRGBA:
		for y := 0; y < b.Dy(); y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+4*w]
			row := dst[3*w*y:]
			for x := 0; x < w; x++ {
				row[3*x], row[3*x+1], row[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
			}
		}
	default:
		i := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bb, _ := im.At(x, y).RGBA()
				dst[i], dst[i+1], dst[i+2] = uint8(r>>8), uint8(g>>8), uint8(bb>>8)
				i += 3
			}
		}
	}
}

// ImageCache is a decoded-image cache that loaders over the same source
// share (Config.ImageCache): a server streaming one shard set to many
// clients decodes each image once for all of them and holds one cache's
// memory, not one per stream. Safe for concurrent use.
type ImageCache struct{ c *cache }

// NewImageCache returns a cache of at most maxBytes of decoded pixels
// (entries in use are kept past the bound until released).
func NewImageCache(maxBytes int64) *ImageCache { return &ImageCache{c: newCache(maxBytes)} }

// Bytes returns the pixel bytes the cache holds.
func (ic *ImageCache) Bytes() int64 {
	ic.c.mu.Lock()
	defer ic.c.mu.Unlock()
	return ic.c.cur
}

// ycc is color.YCbCrToRGB (JFIF, 16.16 fixed point), inlined.
func ycc(y, cb, cr uint8) (uint8, uint8, uint8) {
	yy1 := int32(y) * 0x10101
	cb1 := int32(cb) - 128
	cr1 := int32(cr) - 128
	r := yy1 + 91881*cr1
	if uint32(r)&0xff000000 == 0 {
		r >>= 16
	} else {
		r = ^(r >> 31)
	}
	g := yy1 - 22554*cb1 - 46802*cr1
	if uint32(g)&0xff000000 == 0 {
		g >>= 16
	} else {
		g = ^(g >> 31)
	}
	b := yy1 + 116130*cb1
	if uint32(b)&0xff000000 == 0 {
		b >>= 16
	} else {
		b = ^(b >> 31)
	}
	return uint8(r), uint8(g), uint8(b)
}

// cache holds decoded images by row id, bounded by bytes, LRU. Concurrent
// requests for one row wait for a single decode. Entries in use are never
// recycled: their pixel buffer returns to the free list only when the
// last user releases it after eviction.
type cache struct {
	mu       sync.Mutex
	max, cur int64
	entries  map[int64]*entry
	lru      list.List // of *entry, front = most recent
	free     [][]byte
}

type entry struct {
	row     int64
	w, h    int // the image's size as checked before its decode
	bpp     int // bytes a pixel of its decoder's own image
	ready   chan struct{}
	img     augment.Image
	err     error
	refs    int
	evicted bool
	elem    *list.Element
}

func newCache(maxBytes int64) *cache {
	return &cache{max: maxBytes, entries: map[int64]*entry{}}
}

// size returns the size of row's image checked against lim (see
// limits.imageSize), from the entry of a row already in the cache where
// there is one: a cached image is judged by the same figures as a new
// one, without reading its header again.
func (c *cache) size(row int64, src *shard.Image, lim *limits) (w, h, bpp int, err error) {
	c.mu.Lock()
	e := c.entries[row]
	if e != nil {
		w, h, bpp = e.w, e.h, e.bpp
	}
	c.mu.Unlock()
	if e == nil {
		return lim.imageSize(src)
	}
	return w, h, bpp, imagehdr.Check(w, h, bpp, lim.maxPixels, lim.imageBytes)
}

// get returns the decoded image of row, decoding it (in the calling
// goroutine) when absent. w, h and bpp are its checked size (size): the
// pixel buffer is sized by them, never by what the row states. decoded
// reports whether this call decoded. The caller must call put(e) when
// done with the pixels.
func (c *cache) get(row int64, src *shard.Image, w, h, bpp int) (e *entry, decoded bool) {
	c.mu.Lock()
	if e = c.entries[row]; e != nil {
		e.refs++
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.mu.Unlock()
		<-e.ready
		return e, false
	}
	e = &entry{row: row, w: w, h: h, bpp: bpp, ready: make(chan struct{}), refs: 1}
	c.entries[row] = e
	buf := c.takeFree(3 * int64(w) * int64(h))
	c.mu.Unlock()

	e.img, e.err = decodeRow(src, buf)
	if e.err == nil && (e.img.W != w || e.img.H != h) {
		// The checked header is not the one the decoder read.
		e.err = fmt.Errorf("decoded %dx%d, header says %dx%d", e.img.W, e.img.H, w, h)
	}

	c.mu.Lock()
	if e.err != nil {
		delete(c.entries, row) // failures are not cached
		e.evicted = true
		if buf != nil {
			c.recycle(buf)
		}
	} else {
		c.cur += int64(cap(e.img.Pix))
		e.elem = c.lru.PushFront(e)
		c.evict()
	}
	c.mu.Unlock()
	close(e.ready)
	return e, true
}

// put releases one use of e.
func (c *cache) put(e *entry) {
	c.mu.Lock()
	e.refs--
	if e.refs == 0 && e.evicted && e.err == nil && e.img.Pix != nil {
		c.recycle(e.img.Pix)
		e.img.Pix = nil
	}
	c.mu.Unlock()
}

func (c *cache) evict() {
	for c.cur > c.max {
		el := c.lru.Back()
		if el == nil {
			return
		}
		e := el.Value.(*entry)
		c.lru.Remove(el)
		e.elem = nil
		delete(c.entries, e.row)
		c.cur -= int64(cap(e.img.Pix))
		e.evicted = true
		if e.refs == 0 {
			c.recycle(e.img.Pix)
			e.img.Pix = nil
		}
	}
}

// maxFree is how many evicted pixel buffers the cache keeps for reuse.
const maxFree = 16

// takeFree removes and returns the smallest free buffer holding need
// bytes, or nil. Images differ in size: handing out any buffer would drop
// the ones too small for the next decode to the garbage collector, and
// the heap would grow by a decode's pixels each time (a fifth of a
// coco-tiny run's allocations). need is the image's checked size.
func (c *cache) takeFree(need int64) []byte {
	best := -1
	for i, b := range c.free {
		if int64(cap(b)) >= need && (best < 0 || cap(b) < cap(c.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := c.free[best]
	last := len(c.free) - 1
	c.free[best], c.free[last] = c.free[last], nil
	c.free = c.free[:last]
	return b
}

// recycle keeps b for reuse; when the list is full the smallest buffer
// goes, which fits the fewest later decodes.
func (c *cache) recycle(b []byte) {
	if len(c.free) < maxFree {
		c.free = append(c.free, b[:0])
		return
	}
	small := 0
	for i := range c.free {
		if cap(c.free[i]) < cap(c.free[small]) {
			small = i
		}
	}
	if cap(b) > cap(c.free[small]) {
		c.free[small] = b[:0]
	}
}
