package geom

// ClipRect appends to dst the part of ring inside r (closed rectangle) and
// returns the extended slice. It is Sutherland–Hodgman with the four edge
// stages pipelined vertex by vertex, so it needs no scratch beyond dst.
//
// Consecutive duplicate vertices are merged. When fewer than three distinct
// vertices remain (the ring misses r, or only touches it), nothing is
// appended: callers detect an empty result by an unchanged length.
//
// As with any Sutherland–Hodgman clip, a concave ring that leaves and
// re-enters r comes back as one ring joined by zero-width bridges along r's
// border. Under the even-odd rule such a bridge is two coincident opposite
// edges whose crossings cancel, so it covers no cell centre the parts
// do not already cover.
func ClipRect(dst, ring []float32, r Rect) []float32 {
	if r.Empty() {
		return dst
	}
	c := clipper{dst: dst, start: len(dst), keep: true}
	c.setRect(r)
	c.run(ring)
	return c.dst
}

// ClipBounds returns the bounding box of the instance clipped to r: the
// union of the bounds of ClipRect applied to each ring, computed without
// materialising the clipped rings. ok is false when every clipped ring is
// empty. This is the box an instance keeps after an augmentation crops it,
// which is usually smaller than the crop of its old box.
func ClipBounds(rings [][]float32, r Rect) (box Rect, ok bool) {
	box = emptyRect()
	if r.Empty() {
		return box, false
	}
	var c clipper
	c.setRect(r)
	for _, ring := range rings {
		c.bounds = emptyRect()
		c.n = 0
		c.run(ring)
		if c.n >= 3 {
			box, ok = box.Union(c.bounds), true
		}
	}
	return box, ok
}

type clipStage struct {
	fx, fy, sx, sy float64 // first and previous vertex seen by this stage
	has            bool
}

type clipper struct {
	x0, y0, x1, y1 float64
	st             [4]clipStage

	// Sink state. keep selects appending to dst; bounds are always tracked.
	keep           bool
	dst            []float32
	start, n       int
	fx, fy, lx, ly float32
	bounds         Rect
}

func (c *clipper) setRect(r Rect) {
	c.x0, c.y0, c.x1, c.y1 = float64(r.X0), float64(r.Y0), float64(r.X1), float64(r.Y1)
}

func (c *clipper) run(ring []float32) {
	c.st = [4]clipStage{}
	for i := 0; i+1 < len(ring); i += 2 {
		c.push(0, float64(ring[i]), float64(ring[i+1]))
	}
	c.close(0)
	c.finish()
}

// inside reports whether (x, y) is on the inner side of stage k's edge.
// NaN compares false, so NaN vertices count as outside.
func (c *clipper) inside(k int, x, y float64) bool {
	switch k {
	case 0:
		return x >= c.x0
	case 1:
		return y >= c.y0
	case 2:
		return x <= c.x1
	default:
		return y <= c.y1
	}
}

// cross returns where segment s→p meets stage k's edge. The coordinate on
// the edge is set exactly to the edge's value so clipped vertices lie on r.
func (c *clipper) cross(k int, sx, sy, px, py float64) (float64, float64) {
	switch k {
	case 0:
		return c.x0, sy + (c.x0-sx)*(py-sy)/(px-sx)
	case 1:
		return sx + (c.y0-sy)*(px-sx)/(py-sy), c.y0
	case 2:
		return c.x1, sy + (c.x1-sx)*(py-sy)/(px-sx)
	default:
		return sx + (c.y1-sy)*(px-sx)/(py-sy), c.y1
	}
}

func (c *clipper) push(k int, x, y float64) {
	if k == 4 {
		c.emit(x, y)
		return
	}
	s := &c.st[k]
	in := c.inside(k, x, y)
	if !s.has {
		s.fx, s.fy, s.has = x, y, true
	} else if c.inside(k, s.sx, s.sy) != in {
		ix, iy := c.cross(k, s.sx, s.sy, x, y)
		c.push(k+1, ix, iy)
	}
	if in {
		c.push(k+1, x, y)
	}
	s.sx, s.sy = x, y
}

func (c *clipper) close(k int) {
	if k == 4 {
		return
	}
	s := &c.st[k]
	if s.has && c.inside(k, s.sx, s.sy) != c.inside(k, s.fx, s.fy) {
		ix, iy := c.cross(k, s.sx, s.sy, s.fx, s.fy)
		c.push(k+1, ix, iy)
	}
	c.close(k + 1)
}

func (c *clipper) emit(x64, y64 float64) {
	x, y := float32(x64), float32(y64)
	if c.n > 0 && x == c.lx && y == c.ly {
		return
	}
	if c.n == 0 {
		c.fx, c.fy = x, y
	}
	c.lx, c.ly = x, y
	c.n++
	if c.keep {
		c.dst = append(c.dst, x, y)
	}
	if x == x && y == y { // NaN would poison min and max
		b := &c.bounds
		b.X0, b.X1 = min(b.X0, x), max(b.X1, x)
		b.Y0, b.Y1 = min(b.Y0, y), max(b.Y1, y)
	}
}

func (c *clipper) finish() {
	if c.n > 1 && c.lx == c.fx && c.ly == c.fy {
		c.n--
		if c.keep {
			c.dst = c.dst[:len(c.dst)-2]
		}
	}
	if c.n < 3 && c.keep {
		c.dst = c.dst[:c.start]
	}
}
