package metrics

// The default COCOeval parameters. They are fixed: the point of this
// package is to produce the numbers every COCO paper reports.

// numThr, numRec, numArea and numMaxDet are the sizes of COCOeval's
// precision array dimensions T, R, A and M.
const (
	numThr    = 10
	numRec    = 101
	numArea   = 4
	numMaxDet = 3
)

// IoUThresholds are COCOeval's iouThrs: numpy.linspace(.5, .95, 10), which
// is not the decimal literals (the ninth is 0.8999999999999999).
var IoUThresholds = linspace(.5, .95, numThr)

// RecallThresholds are COCOeval's recThrs: numpy.linspace(0, 1, 101), i.e.
// i·0.01 in float64 (0.35000000000000003, not 0.35).
var RecallThresholds = linspace(0, 1, numRec)

// MaxDets are the per-(image, category) detection caps of the summary.
var MaxDets = [numMaxDet]int{1, 10, 100}

// AreaRange is an inclusive range of areas in original-image pixels.
type AreaRange struct {
	Label  string
	Lo, Hi float64
}

// AreaRanges are COCOeval's areaRng in order: all, small, medium, large.
// Both ends are inclusive, so an area of exactly 32² is both small and
// medium.
var AreaRanges = [numArea]AreaRange{
	{"all", 0, 1e10},
	{"small", 0, 32 * 32},
	{"medium", 32 * 32, 96 * 96},
	{"large", 96 * 96, 1e10},
}

func (r AreaRange) outside(a float64) bool { return a < r.Lo || a > r.Hi }

// linspace reproduces numpy.linspace bit for bit: y[i] = i·step + start
// with step = (stop-start)/(num-1), each operation rounded, and the last
// value set to stop.
func linspace(start, stop float64, num int) []float64 {
	y := make([]float64, num)
	step := (stop - start) / float64(num-1)
	for i := range y {
		// The conversion stops the compiler fusing the multiply-add, which
		// numpy never does.
		y[i] = float64(float64(i)*step) + start
	}
	y[num-1] = stop
	return y
}
