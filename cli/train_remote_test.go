package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/remote"
	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/train"
)

// Training from a segpipe server gives the same model as training from the
// same shards on this machine: the loss, validation and weights do not
// depend on the transport.
func TestTrainRemoteMatchesLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("trains twice")
	}
	dir := miniShards(t)
	addr, stop := serveShards(t, dir, 2)
	args := []string{"train", "--variant", "n", "--epochs", "2", "--batch", "4", "--imgsz", "64", "--workers", "1",
		"--optimizer", "sgd", "--nbs", "8", "--warmup-epochs", "0", "--mosaic", "0.5", "--close-mosaic", "0", "--max-det", "50"}
	local, far := filepath.Join(t.TempDir(), "local"), filepath.Join(t.TempDir(), "remote")
	if code, _, errs := run(t, append(args, "--shards", dir, "--out", local)...); code != ExitOK {
		t.Fatalf("local train: exit %d: %s", code, errs)
	}
	code, _, errs := run(t, append(args, "--remote", addr, "--remote-token", "tk", "--shards", "mini", "--out", far)...)
	if code != ExitOK {
		t.Fatalf("remote train: exit %d: %s", code, errs)
	}
	sameTensors(t, filepath.Join(local, train.LastFile), filepath.Join(far, train.LastFile))
	t.Logf("local results %v", lossColumns(t, local))
	a, b := lossColumns(t, local), lossColumns(t, far)
	if len(a) != len(b) {
		t.Fatalf("results rows %d vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("results row %d: remote %v, local %v", i, b[i], a[i])
		}
	}
	cfg, err := os.ReadFile(filepath.Join(far, train.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cfg, []byte(`"remote": "`+addr+`"`)) || !bytes.Contains(cfg, []byte(`"shards": "mini"`)) {
		t.Errorf("config.json does not name the server and shard set:\n%s", cfg)
	}
	// A wrong token is refused before any training.
	if code, _, _ := run(t, append(args, "--remote", addr, "--remote-token", "nope", "--shards", "mini", "--out", filepath.Join(t.TempDir(), "x"))...); code == ExitOK {
		t.Error("a wrong token trained")
	}
	stop()
}

func sameTensors(t *testing.T, a, b string) {
	t.Helper()
	fa, err := safetensors.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := safetensors.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(fa.Tensors) != len(fb.Tensors) {
		t.Fatalf("%d vs %d tensors", len(fa.Tensors), len(fb.Tensors))
	}
	for k, v := range fa.Tensors {
		if w, ok := fb.Tensors[k]; !ok || !bytes.Equal(v.Data, w.Data) {
			t.Errorf("tensor %s differs", k)
		}
	}
}

// lossColumns returns results.csv rows without the timing columns.
func lossColumns(t *testing.T, run string) [][11]string {
	t.Helper()
	f, err := os.Open(filepath.Join(run, train.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out [][11]string
	for _, r := range rows[1:] {
		var x [11]string
		copy(x[:], r)
		out = append(out, x)
	}
	return out
}

// The remote training data streams windowed batches only where the device
// expands them (train.ExpandsWindows: cuda) and only for training;
// validation streams, and every stream for cpu and emu, are dense.
func TestRemoteDataWindowedForTrainingOnly(t *testing.T) {
	dir := miniShards(t)
	addr, stop := serveShards(t, dir, 1)
	defer stop()
	cl, err := remote.NewClient(remote.ClientConfig{Addr: addr, Token: "tk"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, dev := range []string{"cpu", "emu"} {
		be, err := device.Open(dev)
		if err != nil {
			t.Fatal(err)
		}
		if train.ExpandsWindows(be) {
			t.Errorf("%s expands windows", dev)
		}
	}
	ctx := context.Background()
	for _, c := range []struct {
		windowed, val, want bool
	}{{false, false, false}, {true, true, false}, {true, false, true}} {
		data, _, err := remoteData(ctx, cl, "mini", c.windowed)
		if err != nil {
			t.Fatal(err)
		}
		s, err := data.Open(ctx, pipeline.Config{BatchSize: 2, Val: c.val, Augment: augment.DefaultConfig()})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := batch.IsWindowed(rec.Schema()); got != c.want {
			t.Errorf("windowed data %v, validation %v: windowed batches %v, want %v", c.windowed, c.val, got, c.want)
		}
		rec.Release()
		s.Close()
	}
}
