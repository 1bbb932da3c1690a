package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// pythonFile is the generated module, from this directory.
const pythonFile = "../../../../python/segpipe/_augment.py"

// The committed Python constants are what the table gives now: a setting
// added, renamed or re-ranged in augment.Config without go generate fails
// here (and in CI, which also regenerates and diffs).
func TestPythonFresh(t *testing.T) {
	got, err := os.ReadFile(pythonFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := python(augment.Settings()); !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go generate ./pipeline/augment and commit it\nwant:\n%s", pythonFile, want)
	}
}

func TestPyFloat(t *testing.T) {
	for x, want := range map[float64]string{1: "1.0", 0.99: "0.99", 180: "180.0", 0.015: "0.015", 1e-7: "1e-07"} {
		if got := pyFloat(x); got != want {
			t.Errorf("pyFloat(%v) = %s, want %s", x, got, want)
		}
	}
}
