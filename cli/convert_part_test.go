package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segpipe/segpipe/formats/shard"
)

// convertInParts runs every --part of n (in a shuffled order, as a job
// scheduler would) into out, then the merge, and returns out's files.
func convertInParts(t *testing.T, base []string, out string, n int, seed uint64) map[string][]byte {
	t.Helper()
	for _, i := range rand.New(rand.NewPCG(seed, 0)).Perm(n) {
		args := append(append([]string{}, base...), "--out", out, "--part", fmt.Sprintf("%d/%d", i, n))
		code, stdout, errs := run(t, args...)
		if code != ExitOK {
			t.Fatalf("part %d/%d: exit %d: %s", i, n, code, errs)
		}
		if !strings.Contains(stdout, "segpipe manifest merge "+out) {
			t.Errorf("part %d/%d does not say how to merge:\n%s", i, n, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, shard.ManifestName)); err == nil {
		t.Fatal("parts wrote manifest.json before the merge")
	}
	code, stdout, errs := run(t, "manifest", "merge", out, "--verify")
	if code != ExitOK || !strings.Contains(stdout, "merged ") {
		t.Fatalf("merge %d parts: exit %d\n%s%s", n, code, stdout, errs)
	}
	return dirFiles(t, out)
}

func TestConvertPartsMergeToTheSingleProcessBytes(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 24)
	yoloData := filepath.Join(repoRoot(t), "testdata", "yolo", "good", "data.yaml")
	for _, tc := range []struct {
		name  string
		base  []string
		parts []int
	}{
		{"coco", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--shard-size", "2KiB"}, []int{1, 2, 3, 40}},
		{"yolo", []string{"convert", "yolo", "--data", yoloData, "--split", "train", "--shard-size", "1B"}, []int{2, 5}},
		// Pre-decoded rows are planned from their stored size (headers
		// only), and must cut where the writer cuts after decoding.
		{"coco-zstd", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--shard-size", "12KiB",
			"--pixels", "zstd", "--max-side", "32"}, []int{2, 3}},
		{"yolo-raw", []string{"convert", "yolo", "--data", yoloData, "--split", "train", "--shard-size", "1B",
			"--pixels", "raw"}, []int{2}},
	} {
		ref := filepath.Join(tmp, tc.name+"-ref")
		if code, _, errs := run(t, append(tc.base, "--out", ref)...); code != ExitOK {
			t.Fatalf("%s: single process: exit %d: %s", tc.name, code, errs)
		}
		want := dirFiles(t, ref)
		for _, n := range tc.parts {
			out := filepath.Join(tmp, fmt.Sprintf("%s-%d", tc.name, n))
			sameDirs(t, fmt.Sprintf("%s in %d parts", tc.name, n), want, convertInParts(t, tc.base, out, n, uint64(n)))
		}
	}
}

func TestConvertPartsCocoTiny(t *testing.T) {
	root := repoShared(t, "data/coco-tiny")
	base := []string{"convert", "coco", "--annotations", filepath.Join(root, "annotations", "instances_val2017.json"),
		"--images", filepath.Join(root, "val2017"), "--shard-size", "1MiB"}
	for _, tc := range []struct {
		name  string
		extra []string
		parts int
	}{
		{"jpeg", nil, 4},
		// Pre-decoded, shrunk pixels: planned from the headers alone.
		{"zstd", []string{"--pixels", "zstd", "--max-side", "320"}, 2},
	} {
		args := append(append([]string{}, base...), tc.extra...)
		ref := filepath.Join(t.TempDir(), "ref")
		if code, _, errs := run(t, append(args, "--out", ref)...); code != ExitOK {
			t.Fatalf("%s: exit %d: %s", tc.name, code, errs)
		}
		want := dirFiles(t, ref)
		if len(want) < 3 {
			t.Fatalf("%s: want several shards at 1MiB, got %d files", tc.name, len(want))
		}
		what := fmt.Sprintf("coco-tiny val2017 %s in %d parts", tc.name, tc.parts)
		sameDirs(t, what, want, convertInParts(t, args, filepath.Join(t.TempDir(), "parts"), tc.parts, 9))
	}
}

func TestConvertPartErrors(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 6)
	base := []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--shard-size", "2KiB"}
	for _, p := range []string{"4/4", "x", "1/0", "-1/2"} {
		code, _, errs := run(t, append(base, "--out", filepath.Join(tmp, "bad"), "--part", p)...)
		if code != ExitUsage || !strings.Contains(errs, "--part") {
			t.Errorf("--part %s: exit %d: %s", p, code, errs)
		}
	}
	out := filepath.Join(tmp, "half")
	if code, _, errs := run(t, append(base, "--out", out, "--part", "1/2")...); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// A part rerun after it finished is a no-op, like convert --resume.
	if code, stdout, errs := run(t, append(base, "--out", out, "--part", "1/2", "--resume")...); code != ExitOK || !strings.Contains(stdout, "nothing to do") {
		t.Errorf("rerun of a finished part: exit %d\n%s%s", code, stdout, errs)
	}
	code, _, errs := run(t, "manifest", "merge", out)
	if code != ExitFailure || !strings.Contains(errs, "(0/2)") {
		t.Errorf("merge with a part missing: exit %d: %s", code, errs)
	}
	// --wait finds a part that finishes while it waits.
	mergePoll = 20 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		if code, _, errs := run(t, append(base, "--out", out, "--part", "0/2")...); code != ExitOK {
			t.Errorf("part 0/2: exit %d: %s", code, errs)
		}
	}()
	if code, stdout, errs := run(t, "manifest", "merge", out, "--wait", "1m"); code != ExitOK || !strings.Contains(stdout, "merged ") {
		t.Errorf("merge --wait: exit %d\n%s%s", code, stdout, errs)
	}
	<-done
	if code, _, _ := run(t, "manifest", "merge"); code != ExitUsage {
		t.Errorf("merge without DIR: exit %d", code)
	}

}

func TestShellWord(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"shards/train2017", "shards/train2017"},
		{"s3://b/p?endpoint=http://127.0.0.1:7070&region=us-east-1", "'s3://b/p?endpoint=http://127.0.0.1:7070&region=us-east-1'"},
		{"my shards", "'my shards'"},
		{"it's", `'it'\''s'`},
		{"", "''"},
	} {
		if got := shellWord(c.in); got != c.want {
			t.Errorf("shellWord(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
