package cli

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressInterval is how often progress is logged when stderr is not a
// terminal (a file, a pipe, CI).
var progressInterval = 10 * time.Second

// progress reports long work: a bar when stderr is a terminal, plain
// periodic slog records otherwise, so logs stay greppable.
type progress struct {
	what  string
	total int64

	mu      sync.Mutex
	bar     *progressbar.ProgressBar
	done    int64
	done0   int64 // done when the progress started (a resumed run)
	bytes   int64
	start   time.Time
	lastLog time.Time
}

// isTerminal reports whether w is an interactive terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newProgress(stderr io.Writer, what string, total, done int64) *progress {
	p := &progress{what: what, total: total, done: done, done0: done, start: time.Now()}
	p.lastLog = p.start
	if isTerminal(stderr) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("img"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		p.bar.Set64(done)
	}
	return p
}

// add records n more items carrying b bytes.
func (p *progress) add(n int, b int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	p.bytes += b
	if p.bar != nil {
		p.bar.Add(n)
		return
	}
	if now := time.Now(); now.Sub(p.lastLog) >= progressInterval {
		p.lastLog = now
		p.log("progress")
	}
}

func (p *progress) log(msg string) {
	secs := max(time.Since(p.start).Seconds(), 1e-9)
	attrs := []any{"done", p.done, "total", p.total, "percent", percent(p.done, p.total),
		"per_s", round1(float64(p.done-p.done0) / secs)}
	if p.bytes > 0 { // work that reads or writes data also reports its rate
		attrs = append(attrs, "mb_per_s", round1(float64(p.bytes)/1e6/secs))
	}
	slog.Info(p.what+" "+msg, attrs...)
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		return
	}
	p.log("finished")
}

func percent(a, b int64) float64 {
	if b == 0 {
		return 100
	}
	return round1(100 * float64(a) / float64(b))
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
