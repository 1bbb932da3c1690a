//go:build !nocloud

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/s3test"
)

// objectFiles reads the objects below a bucket prefix from the server's
// posix backend (one file per object), as dirFiles reads a shard directory.
func objectFiles(t *testing.T, srv *s3test.Server, bucket, prefix string) map[string][]byte {
	t.Helper()
	return dirFiles(t, srv.Dir(bucket, prefix))
}

// TestBucketConvertInspectDumpBench: a conversion to a bucket writes the
// same bytes as one to a local directory; inspect --verify passes on it and
// catches an object damaged behind the server's back; dump from the bucket
// (with and without the local cache) gives the batches a local dump gives,
// bit for bit; bench reads it.
func TestBucketConvertInspectDumpBench(t *testing.T) {
	srv := s3test.Start(t, "data")
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 16)
	local := filepath.Join(tmp, "local")
	url := srv.URL("data", "coco/mini")
	for _, out := range []string{local, url} {
		if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", out, "--shard-size", "2KiB"); code != ExitOK {
			t.Fatalf("convert --out %s: exit %d: %s", out, code, errs)
		}
	}
	want := dirFiles(t, local)
	if len(want) < 4 {
		t.Fatalf("want several shards, got %d files", len(want))
	}
	sameDirs(t, "bucket conversion", want, objectFiles(t, srv, "data", "coco/mini"))

	if code, stdout, errs := run(t, "inspect", "--verify", url); code != ExitOK || !strings.Contains(stdout, "verify: ok") {
		t.Fatalf("inspect --verify %s: exit %d\n%s\n%s", url, code, stdout, errs)
	}

	dumpOf := func(shards string, extra ...string) []byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), "b.arrows")
		args := append(append([]string{}, extra...), "dump", "--shards", shards, "--batches", "3", "--batch", "4", "--imgsz", "64", "--seed", "3", "--out", out)
		if code, _, errs := run(t, args...); code != ExitOK {
			t.Fatalf("dump %s: exit %d: %s", shards, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ref := dumpOf(local)
	cache := filepath.Join(tmp, "cache")
	for i, got := range [][]byte{dumpOf(url), dumpOf(url, "--cache-dir", cache), dumpOf(url, "--cache-dir", cache)} {
		if !bytes.Equal(got, ref) {
			t.Fatalf("dump %d from the bucket differs from the local dump (%d vs %d bytes)", i, len(got), len(ref))
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) == 0 {
		t.Error("--cache-dir stayed empty")
	}

	if code, out, errs := run(t, "bench", "--shards", url, "--batch", "4", "--imgsz", "64", "--workers", "2", "--json"); code != ExitOK || !strings.Contains(out, `"images": 16`) {
		t.Fatalf("bench from the bucket: exit %d\n%s\n%s", code, out, errs)
	}

	victim := filepath.Join(srv.Dir("data", "coco/mini"), shard.ShardName(1))
	orig, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	orig[len(orig)/2] ^= 0x55
	if err := os.WriteFile(victim, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errs := run(t, "inspect", "--verify", url)
	if code != ExitFailure || !strings.Contains(stdout, shard.ShardName(1)) || !strings.Contains(stdout, "sha256") {
		t.Fatalf("damaged object: exit %d\nstdout: %s\nstderr: %s", code, stdout, errs)
	}
}

// TestBucketConvertResume: a conversion to a bucket interrupted anywhere
// continues with --resume and ends with exactly the objects of an
// uninterrupted local conversion, and no manifest is visible before that.
func TestBucketConvertResume(t *testing.T) {
	srv := s3test.Start(t, "data")
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 24)
	args := func(out string, extra ...string) []string {
		return append([]string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", out, "--shard-size", "2KiB"}, extra...)
	}
	local := filepath.Join(tmp, "local")
	if code, _, errs := run(t, args(local)...); code != ExitOK {
		t.Fatalf("convert: %s", errs)
	}
	want := dirFiles(t, local)
	src, err := coco.Open(ann, imgs, coco.Options{})
	if err != nil {
		t.Fatal(err)
	}
	desc := shard.Source{Kind: "coco", Args: map[string]string{"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
	for _, stopAt := range []int{0, 11, 23} {
		prefix := "r" + strconv.Itoa(stopAt)
		out := srv.URL("data", prefix)
		o := convertOpts{out: out, shardSize: 2 << 10}
		if _, err := writeShards(context.Background(), &bytes.Buffer{}, failingSource{src, stopAt}, desc, o); !errors.Is(err, errInjected) {
			t.Fatalf("stop %d: err %v, want the injected failure", stopAt, err)
		}
		if _, err := os.Stat(filepath.Join(srv.Dir("data", prefix), shard.ManifestName)); err == nil {
			t.Fatalf("stop %d: interrupted run left a manifest", stopAt)
		}
		code, stdout, errs := run(t, args(out, "--resume")...)
		if code != ExitOK {
			t.Fatalf("resume after %d: exit %d: %s", stopAt, code, errs)
		}
		if stopAt >= 11 && !strings.Contains(stdout, "already in finished shards") {
			t.Errorf("resume after %d did not reuse finished shards:\n%s", stopAt, stdout)
		}
		sameDirs(t, "bucket resumed after "+strconv.Itoa(stopAt), want, objectFiles(t, srv, "data", prefix))
	}
}

// TestBucketMissingObjects: a prefix without a manifest and a manifest
// naming a missing object are errors that say which.
func TestBucketMissingObjects(t *testing.T) {
	srv := s3test.Start(t, "data")
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 8)
	url := srv.URL("data", "set")
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", url, "--shard-size", "2KiB"); code != ExitOK {
		t.Fatalf("convert: %s", errs)
	}
	code, _, errs := run(t, "inspect", srv.URL("data", "nothing-here"))
	if code != ExitFailure || !strings.Contains(errs, "not a finished shard directory") {
		t.Fatalf("inspect of an empty prefix: exit %d: %s", code, errs)
	}
	if err := os.Remove(filepath.Join(srv.Dir("data", "set"), shard.ShardName(0))); err != nil {
		t.Fatal(err)
	}
	// A missing object is a damaged shard like a truncated one: skipped,
	// counted and named, the run goes on with the rest.
	code, out, errs := run(t, "bench", "--shards", url, "--batch", "2", "--imgsz", "64")
	if code != ExitOK || !strings.Contains(out+errs, "bad_shard=") || !strings.Contains(errs, "s3://data/set/"+shard.ShardName(0)) {
		t.Fatalf("bench with a missing object: exit %d: %s%s", code, out, errs)
	}
}

// TestBucketServeRoot: serve's bucket root opens the shard sets below it
// and reports an absent one as not existing.
func TestBucketServeRoot(t *testing.T) {
	srv := s3test.Start(t, "data")
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 8)
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", srv.URL("data", "root/coco/mini")); code != ExitOK {
		t.Fatalf("convert: %s", errs)
	}
	root := srv.URL("data", "root")
	if err := checkShardRoot(root); err != nil {
		t.Fatal(err)
	}
	open := openShardsBelow(root)
	src, err := open(context.Background(), "coco/mini")
	if err != nil {
		t.Fatal(err)
	}
	defer src.(interface{ Close() error }).Close()
	n := 0
	for _, r := range src.BlockRows() {
		n += r
	}
	if n != 8 {
		t.Fatalf("served set has %d rows, want 8", n)
	}
	if _, err := open(context.Background(), "coco/absent"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent set: %v, want os.ErrNotExist", err)
	}
	if _, err := open(context.Background(), "../escape"); err == nil {
		t.Fatal("a set name with .. was accepted")
	}
}

// TestBucketConvertPartsMerge: a distributed conversion into a bucket (the
// parts in a shuffled order, one interrupted and resumed), then the merge
// there, leaves exactly the objects of a local single-process conversion,
// byte for byte: the shards, manifest.json, and no part manifest or
// journal. No manifest.json is visible before the merge.
func TestBucketConvertPartsMerge(t *testing.T) {
	srv := s3test.Start(t, "data")
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 24)
	base := []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--shard-size", "1KiB"}
	local := filepath.Join(tmp, "local")
	if code, _, errs := run(t, append(base, "--out", local)...); code != ExitOK {
		t.Fatalf("single process: exit %d: %s", code, errs)
	}
	want := dirFiles(t, local)
	const n = 3
	if len(want) < 2*n+1 {
		t.Fatalf("want at least two shards per part, got %d files", len(want))
	}
	const prefix = "coco/parts"
	url := srv.URL("data", prefix)

	// Part 1 stops after a few images, as a killed pod would.
	src, err := coco.Open(ann, imgs, coco.Options{})
	if err != nil {
		t.Fatal(err)
	}
	desc := shard.Source{Kind: "coco", Args: map[string]string{"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
	interrupted := shard.Part{Index: 1, Count: n}
	o := convertOpts{out: url, shardSize: 1 << 10, part: &interrupted}
	if o.layout, err = planPart(context.Background(), src, o); err != nil {
		t.Fatal(err)
	}
	stopAt := int(o.layout.ShardRows[0]) + 1 // past the part's first shard
	if _, err := writeShards(context.Background(), &bytes.Buffer{}, failingSource{src, stopAt}, desc, o); !errors.Is(err, errInjected) {
		t.Fatalf("interrupted part: err %v, want the injected failure", err)
	}

	for _, i := range []int{2, 1, 0} {
		args := append(append([]string{}, base...), "--out", url, "--part", fmt.Sprintf("%d/%d", i, n), "--resume")
		code, stdout, errs := run(t, args...)
		if code != ExitOK {
			t.Fatalf("part %d/%d: exit %d: %s", i, n, code, errs)
		}
		if i == interrupted.Index && !strings.Contains(stdout, "already in finished shards") {
			t.Errorf("resumed part %d/%d did not reuse its finished shard:\n%s", i, n, stdout)
		}
		if !strings.Contains(stdout, "segpipe manifest merge "+shellWord(url)+"\n") {
			t.Errorf("part %d/%d does not say how to merge:\n%s", i, n, stdout)
		}
	}
	objects := objectFiles(t, srv, "data", prefix)
	if _, ok := objects[shard.ManifestName]; ok {
		t.Fatal("parts wrote manifest.json before the merge")
	}
	for i := range n {
		if _, ok := objects[shard.PartManifestName(shard.Part{Index: i, Count: n})]; !ok {
			t.Fatalf("no part manifest for part %d/%d", i, n)
		}
	}

	code, stdout, errs := run(t, "manifest", "merge", url, "--verify")
	if code != ExitOK || !strings.Contains(stdout, "merged ") {
		t.Fatalf("merge: exit %d\n%s%s", code, stdout, errs)
	}
	sameDirs(t, "parts merged in the bucket", want, objectFiles(t, srv, "data", prefix))
	if code, stdout, errs := run(t, "manifest", "merge", url); code != ExitOK || !strings.Contains(stdout, "already merged") {
		t.Errorf("second merge: exit %d\n%s%s", code, stdout, errs)
	}
	if code, stdout, errs := run(t, "inspect", "--verify", url); code != ExitOK || !strings.Contains(stdout, "verify: ok") {
		t.Errorf("inspect --verify of the merged bucket: exit %d\n%s%s", code, stdout, errs)
	}
}
