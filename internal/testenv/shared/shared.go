// Package shared locates the project's shared test material (real COCO
// images, reference goldens, architecture specs), which lives beside the
// repository as ../shared relative to the directory holding go.mod, or in
// the directory the environment variable SEGPIPE_SHARED names (relative to
// that directory when not absolute; a missing one hides the material).
//
// The module carries a copy of the part its tests read as numbers (every
// golden, the two state-dict specs, the coco-tiny annotations): the paths
// listed in testdata/copies.txt, copied into testdata/ by
// scripts/sync-goldens.sh, which --check compares with ../shared as this
// package's tests do. Path and Dir answer from ../shared when it is there
// and from the copy when it is not, so those tests run on a clone alone.
//
// What only ../shared holds (the coco-tiny images) skips the test when it
// is absent, so that `go test ./...` passes on a clone; with CI=true it
// fails the test instead, so that CI cannot pass without running it.
package shared

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// copyDir is where the module's copy lives, relative to the module root.
const copyDir = "internal/testenv/shared/testdata"

// Dir returns the shared directory: ../shared when present, else the
// module's copy, which holds only the paths in testdata/copies.txt (a test
// needing anything else asks Path for it, which skips or fails properly).
func Dir(tb testing.TB) string {
	tb.Helper()
	mod, err := moduleRoot()
	if err != nil {
		absent(tb, "%v", err)
		return ""
	}
	root := sharedRoot(mod)
	if _, err := os.Stat(root); err == nil {
		return root
	}
	return filepath.Join(mod, copyDir)
}

// Path returns rel inside the shared directory: ../shared/rel when
// present, else the module's copy of rel when testdata/copies.txt lists
// rel or a directory above it. Otherwise it skips tb, or fails it when the
// environment has CI=true.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := resolve(rel)
	if err != nil {
		absent(tb, "%v", err)
		return ""
	}
	return p
}

// resolve is Path without the test: the path found, or why there is none.
func resolve(rel string) (string, error) {
	mod, err := moduleRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(sharedRoot(mod), rel)
	_, serr := os.Stat(p)
	if serr == nil {
		return p, nil
	}
	units, err := copied(mod)
	if err != nil {
		return "", err
	}
	clean := filepath.ToSlash(filepath.Clean(rel))
	for _, u := range units {
		if clean == u || strings.HasPrefix(clean, u+"/") {
			c := filepath.Join(mod, copyDir, rel)
			if _, err := os.Stat(c); err != nil {
				return "", fmt.Errorf("shared material %s absent and its copy broken (run scripts/sync-goldens.sh): %w", p, err)
			}
			return c, nil
		}
	}
	return "", fmt.Errorf("shared material %s absent and not copied into the module (%s/copies.txt): %w", p, copyDir, serr)
}

// absent skips tb, or fails it under CI, where a test that cannot find
// its material must not pass unnoticed.
func absent(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		tb.Fatalf("%s; CI=true requires it: put the shared material at ../shared or name it with SEGPIPE_SHARED", msg)
		return
	}
	tb.Skip(msg)
}

// moduleRoot returns the directory holding go.mod, above the working
// directory (a test's package directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("shared material: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("shared material: no go.mod above the test directory")
		}
		dir = parent
	}
}

// sharedRoot returns SEGPIPE_SHARED, or ../shared beside the module root.
func sharedRoot(mod string) string {
	env := os.Getenv("SEGPIPE_SHARED")
	switch {
	case env == "":
		return filepath.Join(mod, "..", "shared")
	case filepath.IsAbs(env):
		return env
	default:
		return filepath.Join(mod, env)
	}
}

// copied returns the paths testdata/copies.txt lists, slash-separated,
// without comments and blank lines.
func copied(mod string) ([]string, error) {
	name := filepath.Join(mod, copyDir, "copies.txt")
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("shared material copies: %w", err)
	}
	defer f.Close()
	var units []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			units = append(units, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return units, nil
}
