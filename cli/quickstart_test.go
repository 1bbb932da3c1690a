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
	for i := 0; i < 2; i++ { // the second run replaces the first
		code, out, errs := run(t, "quickstart", "--dir", dir, "--images", "20")
		if code != ExitOK {
			t.Fatalf("run %d: exit %d\nstdout: %s\nstderr: %s", i, code, out, errs)
		}
		for _, want := range []string{"verify: ok", "wrote 20 images", "next:", filepath.Join(dir, "shards")} {
			if !strings.Contains(out, want) {
				t.Fatalf("run %d: output lacks %q:\n%s", i, want, out)
			}
		}
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
