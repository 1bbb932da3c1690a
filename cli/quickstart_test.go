package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
)

func TestQuickstartRunsAndReruns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	// The first run trains one epoch (the slow part, left out under
	// -short); the second stops after converting and replaces the first.
	epochs := []string{"1", "0"}
	if testing.Short() {
		epochs[0] = "0"
	}
	for i, e := range epochs {
		code, out, errs := run(t, "quickstart", "--dir", dir, "--images", "20", "--epochs", e)
		if code != ExitOK {
			t.Fatalf("run %d: exit %d\nstdout: %s\nstderr: %s", i, code, out, errs)
		}
		want := []string{"verify: ok", "wrote 20 images", "next:", filepath.Join(dir, "shards")}
		if e != "0" {
			want = append(want, "mask mAP50", filepath.Join(dir, "run"), filepath.Join(dir, "preview"))
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("run %d: output lacks %q:\n%s", i, w, out)
			}
		}
		if e != "0" {
			for _, f := range []string{"run/results.csv", "run/last.safetensors", "preview/results.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); !os.IsNotExist(err) {
		t.Fatalf("the second run left the first run's training output: %v", err)
	}
	set, err := shard.Open(filepath.Join(dir, "shards"))
	if err != nil || set.Manifest.Rows != 20 {
		t.Fatalf("shards after quickstart: %v", err)
	}
}

func TestQuickstartRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "thesis.tex")
	os.WriteFile(precious, []byte("x"), 0o644)
	code, _, errs := run(t, "quickstart", "--dir", dir)
	if code != ExitFailure || !strings.Contains(errs, "not made by quickstart") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatal("quickstart touched a foreign directory")
	}
	if code, _, _ := run(t, "quickstart", "--images", "0"); code != ExitUsage {
		t.Fatalf("--images 0: exit %d, want %d", code, ExitUsage)
	}
}
