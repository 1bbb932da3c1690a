package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
)

// runBounded is run with a deadline: a command that wrongly accepts what
// it should refuse (serve, quickstart) then stops instead of hanging the
// test.
func runBounded(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := Run(ctx, append([]string{"segpipe", "--log-level", "warn"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// commandPaths lists every command of the real tree as the words that
// name it ("convert coco"), but help.
func commandPaths(c *ucli.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands {
		if sub.Name == "help" {
			continue
		}
		p := append(slices.Clone(prefix), sub.Name)
		out = append(out, p)
		out = append(out, commandPaths(sub, p)...)
	}
	return out
}

// TestEveryCommandRefusesBadInvocationsAsUsage runs every command of the
// tree with an unknown flag and with a stray positional argument (two
// where it takes one), and every group without its sub-command: each is a
// usage error, refused before the command does anything.
func TestEveryCommandRefusesBadInvocationsAsUsage(t *testing.T) {
	root := Commands()
	paths := commandPaths(root, nil)
	if len(paths) < 18 {
		t.Fatalf("found %d commands: %v", len(paths), paths)
	}
	byPath := map[string]*ucli.Command{}
	var walk func(c *ucli.Command, prefix string)
	walk = func(c *ucli.Command, prefix string) {
		for _, sub := range c.Commands {
			byPath[strings.TrimSpace(prefix+" "+sub.Name)] = sub
			walk(sub, prefix+" "+sub.Name)
		}
	}
	walk(root, "")
	for _, p := range paths {
		name := strings.Join(p, " ")
		c := byPath[name]
		group := len(subcommandNames(c)) > 0
		t.Run(name+"/unknown flag", func(t *testing.T) {
			code, out, errs := runBounded(t, append(slices.Clone(p), "--frobnicate")...)
			if code != ExitUsage || !strings.Contains(errs, "frobnicate") {
				t.Fatalf("exit %d, want %d naming the flag\n%s%s", code, ExitUsage, out, errs)
			}
		})
		t.Run(name+"/stray argument", func(t *testing.T) {
			args, want := append(slices.Clone(p), "stray"), "takes no arguments"
			switch {
			case group:
				want = `unknown command "stray"`
			case c.ArgsUsage != "":
				args, want = append(slices.Clone(p), "one", "two"), "exactly one"
			}
			code, out, errs := runBounded(t, args...)
			if code != ExitUsage || !strings.Contains(errs, want) {
				t.Fatalf("exit %d, want %d with %q\n%s%s", code, ExitUsage, want, out, errs)
			}
		})
		if group {
			t.Run(name+"/no sub-command", func(t *testing.T) {
				code, out, errs := runBounded(t, p...)
				if code != ExitUsage || !strings.Contains(errs, "needs a command") || !strings.Contains(errs, "USAGE") {
					t.Fatalf("exit %d, want %d with the help on stderr\n%s%s", code, ExitUsage, out, errs)
				}
				if code, out, _ := runBounded(t, append(slices.Clone(p), "--help")...); code != ExitOK || !strings.Contains(out, "USAGE") {
					t.Fatalf("--help: exit %d\n%s", code, out)
				}
			})
		}
	}
	if code, _, errs := runBounded(t); code != ExitUsage || !strings.Contains(errs, "segpipe needs a command") {
		t.Errorf("no command: exit %d\n%s", code, errs)
	}
}

// TestExitCodeTable holds every command to the exit-code rule: a value
// out of its range, a missing input path and a flag that makes no sense
// are usage errors (2); a failure of the work is 1; success is 0.
func TestExitCodeTable(t *testing.T) {
	tmp := t.TempDir()
	cfg := synth.Config{Images: 6, Seed: 1, Split: "train", MaxSide: 64}
	if err := synth.Generate(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	ann, imgs := synth.AnnotationsPath(tmp, cfg), synth.ImagesDir(tmp)
	shards := filepath.Join(tmp, "shards")
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", shards); code != ExitOK {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	nope := filepath.Join(tmp, "nope")
	out := filepath.Join(tmp, "out")
	loader := []string{"--shards", shards, "--batch", "2", "--imgsz", "64"}
	with := func(args ...string) []string { return append(slices.Clone(loader), args...) }
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bench negative window", append([]string{"bench"}, with("--window", "-1")...), ExitUsage, "--window -1: want at least 1"},
		{"bench zero imgsz", []string{"bench", "--shards", shards, "--imgsz", "0"}, ExitUsage, "--imgsz 0: want at least 1"},
		{"bench zero repeat", append([]string{"bench"}, with("--repeat", "0")...), ExitUsage, "--repeat 0"},
		{"bench zero epochs", append([]string{"bench"}, with("--epochs", "0")...), ExitUsage, "--epochs 0"},
		{"bench missing shards", []string{"bench", "--shards", nope}, ExitUsage, "does not exist"},
		{"bench ok", append([]string{"bench"}, with("--workers", "1")...), ExitOK, "images per CPU-second"},
		{"dump zero batches", append([]string{"dump"}, with("--batches", "0", "--out", out)...), ExitUsage, "--batches 0: want at least 1"},
		{"dump zero imgsz", []string{"dump", "--shards", shards, "--imgsz", "0", "--out", out}, ExitUsage, "--imgsz 0"},
		{"dump negative epoch", append([]string{"dump"}, with("--epoch", "-1", "--out", out)...), ExitUsage, "--epoch -1: want at least 0"},
		{"dump negative workers", append([]string{"dump"}, with("--workers", "-1", "--out", out)...), ExitUsage, "--workers -1"},
		{"dump missing shards", []string{"dump", "--shards", nope, "--out", out}, ExitUsage, "does not exist"},
		{"dump ok", append([]string{"dump"}, with("--batches", "2", "--out", filepath.Join(tmp, "d.arrows"))...), ExitOK, "wrote 2 batches"},
		{"dump rect and multi-scale", append([]string{"dump"}, with("--rect", "--multi-scale", "0.5", "--out", out)...), ExitUsage, "rect and multi_scale"},
		{"dump multi-scale in val", append([]string{"dump"}, with("--val", "--multi-scale", "0.5", "--out", out)...), ExitUsage, "multi_scale applies to training"},
		{"dump rect training ok", append([]string{"dump"}, with("--rect", "--copy-paste", "1", "--out", filepath.Join(tmp, "r.arrows"))...), ExitOK, "wrote 1 batches"},
		{"preview small tile", append([]string{"preview"}, with("--tile", "8", "--out", out)...), ExitUsage, "--tile 8: want at least 16"},
		{"preview negative skip", append([]string{"preview"}, with("--skip", "-1", "--out", out)...), ExitUsage, "--skip -1"},
		{"preview missing shards", []string{"preview", "--shards", nope, "--out", out}, ExitUsage, "does not exist"},
		{"preview ok", append([]string{"preview"}, with("--tile", "32", "--out", filepath.Join(tmp, "p.png"))...), ExitOK, "wrote"},
		{"train zero imgsz", []string{"train", "--shards", shards, "--imgsz", "0", "--out", out}, ExitUsage, "imgsz 0"},
		{"train missing shards", []string{"train", "--shards", nope, "--out", out}, ExitUsage, "does not exist"},
		{"eval missing annotations", []string{"eval", "--annotations", nope, "--detections", ann}, ExitUsage, "--annotations"},
		{"eval annotations a directory", []string{"eval", "--annotations", tmp, "--detections", ann}, ExitUsage, "is a directory"},
		{"eval bad iou type", []string{"eval", "--annotations", ann, "--detections", ann, "--iou-type", "mask"}, ExitUsage, "--iou-type"},
		{"predict zero batch", []string{"predict", "--weights", nope, "--source", imgs, "--out", out, "--batch", "0"}, ExitUsage, "--batch 0"},
		{"predict missing weights", []string{"predict", "--weights", nope, "--source", imgs, "--out", out}, ExitUsage, "--weights"},
		{"predict missing source", []string{"predict", "--weights", ann, "--source", nope, "--out", out}, ExitUsage, "--source"},
		{"predict weights not a checkpoint", []string{"predict", "--weights", ann, "--source", imgs, "--out", out}, ExitFailure, ""},
		{"synth zero images", []string{"synth", "--out", out, "--images", "0"}, ExitUsage, "--images 0"},
		{"synth small side", []string{"synth", "--out", out, "--max-side", "8"}, ExitUsage, "--max-side 8: want at least 16"},
		{"synth ok", []string{"synth", "--out", filepath.Join(tmp, "s"), "--images", "2", "--annotations-only"}, ExitOK, "wrote 2 images"},
		{"quickstart zero images", []string{"quickstart", "--dir", out, "--images", "0"}, ExitUsage, "--images 0: want 1 to 100000"},
		{"quickstart negative epochs", []string{"quickstart", "--dir", out, "--epochs", "-1"}, ExitUsage, "--epochs -1"},
		{"model summary zero classes", []string{"model", "summary", "--variant", "n", "--classes", "0"}, ExitUsage, "--classes 0"},
		{"model summary bad imgsz", []string{"model", "summary", "--variant", "n", "--imgsz", "31"}, ExitUsage, "--imgsz 31"},
		{"model summary ok", []string{"model", "summary", "--variant", "n"}, ExitOK, "GFLOPs"},
		{"manifest merge missing dir", []string{"manifest", "merge", nope}, ExitUsage, "does not exist"},
		{"manifest merge of a finished set", []string{"manifest", "merge", shards}, ExitOK, "already merged"},
		{"convert coco missing annotations", []string{"convert", "coco", "--annotations", nope, "--images", imgs, "--out", out}, ExitUsage, "nope"},
		{"convert yolo missing data", []string{"convert", "yolo", "--data", nope, "--split", "train", "--out", out}, ExitUsage, "nope"},
		{"inspect missing path", []string{"inspect", nope}, ExitUsage, "does not exist"},
		{"inspect ok", []string{"inspect", shards}, ExitOK, ""},
		{"serve missing shards", []string{"serve", "--shards", nope}, ExitUsage, "does not exist"},
		{"serve missing TLS files", []string{"serve", "--shards", tmp, "--addr", "127.0.0.1:0", "--tls-cert", nope, "--tls-key", nope + ".key"}, ExitUsage, "nope"},
		{"version ok", []string{"version"}, ExitOK, "segpipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, errs := runBounded(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, errs)
			}
			if !strings.Contains(stdout+errs, tc.msg) {
				t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", tc.msg, stdout, errs)
			}
		})
	}
	// device exits 0 with a GPU and 1 without one; never as a usage error.
	if code, _, errs := runBounded(t, "device"); code == ExitUsage {
		t.Errorf("device: exit %d\n%s", code, errs)
	}
}

// TestDumpFillsTheBatchesAsked dumps more batches than one epoch of a
// damaged set yields (its skipped samples leave batches empty, so the
// epoch ends short): the dump continues into the next epoch and writes
// exactly the batches a loader running those epochs in one go delivers.
func TestDumpFillsTheBatchesAsked(t *testing.T) {
	dir, want := damagedShards(t)
	var bad int64
	for _, n := range want {
		bad += n
	}
	const n = 50 // one epoch of --batch 1 yields 40-bad
	out := filepath.Join(t.TempDir(), "b.arrows")
	sumFile := filepath.Join(t.TempDir(), "sum.json")
	code, stdout, errs := run(t, "dump", "--shards", dir, "--batch", "1", "--imgsz", "64", "--val", "--batches", "50",
		"--out", out, "--summary", sumFile, "--workers", "2")
	if code != ExitOK || !strings.Contains(stdout, "wrote 50 batches") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errs)
	}
	var ds struct {
		Images  int64            `json:"images"`
		Skipped map[string]int64 `json:"skipped"`
		Batches []struct {
			Rows int64 `json:"rows"`
		} `json:"batches"`
	}
	b, _ := os.ReadFile(sumFile)
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Batches) != n || ds.Images != n {
		t.Fatalf("summary: %d batches, %d images; want %d of each", len(ds.Batches), ds.Images, n)
	}
	// The first epoch is read whole, so its skips are all counted.
	for reason, k := range want {
		if ds.Skipped[reason] < k {
			t.Errorf("skipped[%s] = %d, want at least %d (%v)", reason, ds.Skipped[reason], k, ds.Skipped)
		}
	}

	// The same batches from one loader over two epochs.
	src, err := pipeline.OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	a := augment.DefaultConfig()
	a.ImgSz = 64
	l, err := pipeline.New(context.Background(), src, pipeline.Config{BatchSize: 1, Val: true, Augment: a, Epochs: 2, Workers: 2, MaxMemory: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ref bytes.Buffer
	var w *ipc.Writer
	got := 0
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if w == nil {
			w = ipc.NewWriter(&ref, ipc.WithSchema(rec.Schema()))
		}
		err = w.Write(rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		if got++; got == n {
			break
		}
	}
	if got != n {
		t.Fatalf("two epochs gave %d batches, want %d (one gives %d)", got, n, 40-bad)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dumped, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dumped, ref.Bytes()) {
		t.Fatalf("dump (%d bytes) differs from one loader's first %d batches (%d bytes)", len(dumped), n, ref.Len())
	}
}
