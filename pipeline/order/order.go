package order

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
)

// DefaultWindowRows is the default minimum number of rows of a shuffle window.
const DefaultWindowRows = 512

// State is the resumable position of a loader: a few integers.
type State struct {
	Seed     uint64 `json:"seed"`
	Epoch    int    `json:"epoch"`
	Consumed int64  `json:"consumed"` // global positions of Epoch already taken by all ranks
}

// Window is a run of the epoch order whose rows come from whole blocks.
type Window struct {
	Start  int64 // first global position
	Rows   int   // number of positions
	Blocks []int // block indices, in reading order
}

// Epoch is the sample order of one epoch.
type Epoch struct {
	Seed    uint64
	Index   int
	N       int64
	Windows []Window

	blockStart []int64 // row id of each block's first row
	blockRows  []int
	perm       [][]int32 // per window: position offset → row offset within the window's blocks
}

// NewEpoch computes the order of epoch e over blocks of the given row
// counts. windowRows ≤ 0 takes DefaultWindowRows.
func NewEpoch(seed uint64, e int, blockRows []int, windowRows int) (*Epoch, error) {
	if e < 0 {
		return nil, fmt.Errorf("order: negative epoch %d", e)
	}
	if windowRows <= 0 {
		windowRows = DefaultWindowRows
	}
	ep := &Epoch{Seed: seed, Index: e, blockRows: append([]int(nil), blockRows...)}
	ep.blockStart = make([]int64, len(blockRows))
	var n int64
	for i, r := range blockRows {
		if r < 0 {
			return nil, fmt.Errorf("order: block %d has %d rows", i, r)
		}
		ep.blockStart[i] = n
		n += int64(r)
	}
	ep.N = n
	blocks := make([]int, len(blockRows))
	for i := range blocks {
		blocks[i] = i
	}
	rng := NewRand(seed, streamBlocks, uint64(e), 0)
	Shuffle(rng, len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })

	var pos int64
	for i := 0; i < len(blocks); {
		w := Window{Start: pos}
		for i < len(blocks) && w.Rows < windowRows {
			if blockRows[blocks[i]] > 0 {
				w.Blocks = append(w.Blocks, blocks[i])
				w.Rows += blockRows[blocks[i]]
			}
			i++
		}
		if w.Rows == 0 {
			continue
		}
		perm := make([]int32, w.Rows)
		for k := range perm {
			perm[k] = int32(k)
		}
		wr := NewRand(seed, streamWindow, uint64(e), uint64(len(ep.Windows)))
		Shuffle(wr, len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		ep.Windows = append(ep.Windows, w)
		ep.perm = append(ep.perm, perm)
		pos += int64(w.Rows)
	}
	return ep, nil
}

// NewSortedEpoch is the order of an epoch that is not shuffled: every row
// in one window, by increasing key (keys[r] for dataset row r), rows of
// equal keys in storage order. It is Ultralytics' rect order (images by
// aspect ratio); with every row in one window, a loader holds the whole
// set's encoded rows.
func NewSortedEpoch(seed uint64, e int, blockRows []int, keys []float64) (*Epoch, error) {
	ep, err := NewEpoch(seed, e, blockRows, 1)
	if err != nil {
		return nil, err
	}
	if int64(len(keys)) != ep.N {
		return nil, fmt.Errorf("order: %d sort keys for %d rows", len(keys), ep.N)
	}
	ep.Windows, ep.perm = nil, nil
	if ep.N == 0 {
		return ep, nil
	}
	if ep.N > math.MaxInt32 {
		return nil, fmt.Errorf("order: %d rows in one window", ep.N)
	}
	w := Window{Rows: int(ep.N)}
	for b, r := range blockRows {
		if r > 0 {
			w.Blocks = append(w.Blocks, b)
		}
	}
	// Blocks in storage order: a window offset is the dataset row id.
	perm := make([]int32, ep.N)
	for k := range perm {
		perm[k] = int32(k)
	}
	sort.SliceStable(perm, func(a, b int) bool { return keys[perm[a]] < keys[perm[b]] })
	ep.Windows, ep.perm = []Window{w}, [][]int32{perm}
	return ep, nil
}

// WindowOf returns the index of the window holding position p.
func (ep *Epoch) WindowOf(p int64) int {
	return sort.Search(len(ep.Windows), func(i int) bool {
		w := ep.Windows[i]
		return w.Start+int64(w.Rows) > p
	})
}

// Locate returns the block and the row within that block of position p.
func (ep *Epoch) Locate(p int64) (block, row int) {
	wi := ep.WindowOf(p)
	w := ep.Windows[wi]
	off := int(ep.perm[wi][p-w.Start])
	for _, b := range w.Blocks {
		if off < ep.blockRows[b] {
			return b, off
		}
		off -= ep.blockRows[b]
	}
	panic("order: window rows disagree with its blocks") // unreachable: Rows is the sum
}

// Row returns the dataset row id (rows numbered across blocks in storage
// order) at position p, 0 ≤ p < N.
func (ep *Epoch) Row(p int64) int64 {
	b, r := ep.Locate(p)
	return ep.blockStart[b] + int64(r)
}

// Partners appends k positions drawn uniformly (with replacement) from the
// window of p. The draws use stream (seed, partners, epoch, p), independent
// of the sample's augmentation stream, so they depend on nothing but
// (seed, epoch, p).
func (ep *Epoch) Partners(dst []int64, p int64, k int) []int64 {
	w := ep.Windows[ep.WindowOf(p)]
	rng := NewRand(ep.Seed, streamPartners, uint64(ep.Index), uint64(p))
	for i := 0; i < k; i++ {
		dst = append(dst, w.Start+int64(IntN(rng, uint64(w.Rows))))
	}
	return dst
}

// RankPositions returns the positions rank r of w takes from start, in
// order: start+r, start+r+w, … below n.
func RankPositions(start, n int64, rank, world int) (first, step int64, count int64) {
	if world <= 0 || rank < 0 || rank >= world || start >= n {
		return 0, 1, 0
	}
	first = start + int64(rank)
	if first >= n {
		return first, int64(world), 0
	}
	return first, int64(world), (n - first + int64(world) - 1) / int64(world)
}

// Stream tags keep the random streams of different purposes independent.
const (
	streamBlocks   = 1
	streamWindow   = 2
	streamPartners = 3
	// StreamSample is the stream of a sample's augmentation draws.
	StreamSample = 4
	// StreamBatch is the stream of a batch's own draws (its multi-scale
	// size), keyed by (epoch, the batch's first position).
	StreamBatch = 5
)

// NewRand returns a PCG generator for stream (seed, tag, a, b). PCG's output
// for a seed is fixed by its definition, and the bounded and float draws
// below are written here rather than taken from math/rand, so orders and
// augmentations do not change with the Go release.
func NewRand(seed, tag, a, b uint64) *rand.PCG {
	p := new(rand.PCG)
	Reseed(p, seed, tag, a, b)
	return p
}

// Reseed resets p to stream (seed, tag, a, b) without allocating.
func Reseed(p *rand.PCG, seed, tag, a, b uint64) {
	h1 := mix(seed ^ mix(tag^0x9e3779b97f4a7c15))
	h1 = mix(h1 ^ a)
	h2 := mix(h1 ^ mix(b+0x632be59bd9b4e019))
	p.Seed(h1, h2)
}

func mix(z uint64) uint64 { // splitmix64 finaliser
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// IntN returns a uniform integer in [0, n) (Lemire's method), n > 0.
func IntN(r *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// Float returns a uniform float64 in [0, 1).
func Float(r *rand.PCG) float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// Uniform returns a uniform float64 in [lo, hi).
func Uniform(r *rand.PCG, lo, hi float64) float64 { return lo + float64((hi-lo)*Float(r)) }

// Shuffle permutes n items by Fisher–Yates with IntN.
func Shuffle(r *rand.PCG, n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, int(IntN(r, uint64(i+1))))
	}
}
