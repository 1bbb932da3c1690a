package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/train"
)

// train --remote takes a comma-separated fleet: the ranks' batches, and so
// the model, are those of local training.
func TestTrainFromAFleetMatchesLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("trains twice")
	}
	dir := miniShards(t)
	a, stopA := serveShards(t, dir, 1)
	b, stopB := serveShards(t, dir, 1)
	args := []string{"train", "--variant", "n", "--epochs", "1", "--batch", "4", "--imgsz", "64", "--workers", "1",
		"--optimizer", "sgd", "--nbs", "8", "--warmup-epochs", "0", "--mosaic", "0.5", "--close-mosaic", "0", "--max-det", "50"}
	local, far := filepath.Join(t.TempDir(), "local"), filepath.Join(t.TempDir(), "fleet")
	if code, _, errs := run(t, append(args, "--shards", dir, "--out", local)...); code != ExitOK {
		t.Fatalf("local train: exit %d: %s", code, errs)
	}
	if code, _, errs := run(t, append(args, "--remote", a+","+b, "--remote-token", "tk", "--shards", "mini", "--out", far)...); code != ExitOK {
		t.Fatalf("fleet train: exit %d: %s", code, errs)
	}
	sameTensors(t, filepath.Join(local, train.LastFile), filepath.Join(far, train.LastFile))
	stopA()
	stopB()
}

func TestServePeerFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--peers-dns", "loaders"}, "want NAME:PORT"},
		{[]string{"--peers-dns", "loaders:8815", "--peer", "grpc://a:8815"}, "alternatives"},
	} {
		code, _, errs := run(t, append([]string{"serve", "--shards", dir}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %s", tc.args, code, errs)
		}
	}
}
