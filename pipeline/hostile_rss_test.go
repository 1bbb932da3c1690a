package pipeline

import (
	"context"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
)

// TestHostileSetPeakRSS measures the process's peak RSS while a loader
// under a 1 GiB budget streams a set of normal images holding one 20,000²
// PNG header, eight truncated 16,000² JPEG headers, one 65,535² RGBA16 PNG
// and one image with 20,000 instances. A measurement, run on request:
// SEGPIPE_RSS=hostile (or =clean for the same set without them), one
// process each, since the peak is the process's.
func TestHostileSetPeakRSS(t *testing.T) {
	mode := os.Getenv("SEGPIPE_RSS")
	if mode == "" || testing.Short() {
		t.Skip("a measurement: set SEGPIPE_RSS=hostile or clean")
	}
	debug.SetGCPercent(25) // as the segpipe binary runs
	rows := synth(t, 200, 5)
	if mode == "hostile" {
		rows = append(rows, hostile(t, 1, "png 20000² rgb"), hostile(t, 2, "png 65535² rgba16"))
		for i := range 8 {
			rows = append(rows, hostile(t, int64(10+i), "jpeg 16000² truncated"))
		}
		many := synth(t, 1, 0)[0]
		many.ImageID = 3
		many.Instances = make([]shard.Instance, 20000)
		for i := range many.Instances {
			many.Instances[i] = shard.Instance{AnnID: int64(i), Class: 1, Polygons: [][]float32{{4, 4, 30, 6, 20, 30}}}
		}
		rows = append(rows, many)
	}
	src, err := OpenShards(writeSet(t, rows))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cfg := Config{BatchSize: 32, MaxMemory: 1 << 30, CacheBytes: 256 << 20, Epochs: 3}
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	images, err := drain(t, l)
	st := l.Stats()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	var hwm string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM") {
			hwm = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	t.Logf("%s: %d images, skipped %v; limits %+v; peak RSS %s against a 1 GiB budget", mode, images, st.Skipped, l.lim, hwm)
	if mode == "hostile" && st.Skipped[imagehdr.ReasonTooLarge] != 3*10 {
		t.Errorf("skipped %v, want %s=30 over three epochs", st.Skipped, imagehdr.ReasonTooLarge)
	}
}
