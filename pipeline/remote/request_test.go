package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// NewRequest is the inverse of Request.Config for everything a request
// carries: a loader configured through a server equals the local one.
func TestNewRequestInvertsConfig(t *testing.T) {
	a := augment.DefaultConfig()
	a.ImgSz, a.Mosaic, a.Degrees, a.Translate, a.Scale, a.Shear, a.Perspective = 96, 0.25, 3, 0.2, 0.3, 1, 0.0005
	a.HSVH, a.HSVS, a.HSVV, a.FlipLR, a.Fill, a.MinSide, a.MinArea, a.MaxAspect, a.KeepCrowd = 0.01, 0.5, 0.2, 0.3, 7, 3, 0.02, 50, true
	cases := []pipeline.Config{
		{BatchSize: 4, Start: order.State{Seed: 9, Epoch: 2, Consumed: 12}, Epochs: 5, CloseMosaic: 2, Augment: a},
		{BatchSize: 2, Rank: 1, WorldSize: 3, Val: true, Augment: a},
		{BatchSize: 8, Augment: augment.DefaultConfig()},
	}
	for i, want := range cases {
		req, err := NewRequest("set/a", want)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		// Through the wire format, as a server reads it.
		parsed, err := ParseRequest(req.Marshal())
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got, err := parsed.Config(pipeline.Config{})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if parsed.Shards != "set/a" {
			t.Errorf("case %d: shards %q", i, parsed.Shards)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("case %d: config through a request\n%+v\nwant\n%+v", i, got, want)
		}
	}
	if _, err := NewRequest("x", pipeline.Config{Stride: 8}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("stride 8: %v, want ErrBadRequest", err)
	}
	if _, err := NewRequest("../x", pipeline.Config{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("shard set outside the root: %v, want ErrBadRequest", err)
	}
}

func TestDataset(t *testing.T) {
	rows := synthRows(t, 10)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	d, err := c.Dataset(context.Background(), "synth")
	if err != nil {
		t.Fatal(err)
	}
	if d.Images != 10 || d.Categories != nil {
		t.Errorf("dataset %+v, want 10 images and no categories", d)
	}
	if _, err := c.Dataset(context.Background(), "nope"); err == nil {
		t.Error("unknown shard set: no error")
	}

	// A shard root: images and the manifest's categories.
	root := t.TempDir()
	dir := filepath.Join(root, "train")
	cats := []shard.Category{{ID: 1, Index: 0, Name: "a"}, {ID: 2, Index: 1, Name: "b"}, {ID: 7, Index: 2, Name: "c"}}
	w, err := shard.Create(dir, shard.WriterOptions{Categories: cats})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows[:6] {
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	srv2 := startServer(t, nil, ServerConfig{Root: root, Open: nil})
	c2 := client(t, ClientConfig{Addr: srv2.addr})
	d, err = c2.Dataset(context.Background(), "train")
	if err != nil {
		t.Fatal(err)
	}
	if d.Images != 6 || !reflect.DeepEqual(d.Categories, cats) {
		t.Errorf("dataset %+v, want 6 images and %v", d, cats)
	}
	if _, err := os.Stat(filepath.Join(dir, shard.ManifestName)); err != nil {
		t.Fatal(err)
	}
}

// Open streams exactly what the local loader yields for the same config.
func TestOpenMatchesLocal(t *testing.T) {
	rows := synthRows(t, 12)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	a := augment.DefaultConfig()
	a.ImgSz, a.Degrees = 64, 5
	cfg := pipeline.Config{BatchSize: 4, Start: order.State{Seed: 3}, Epochs: 2, Augment: a, Workers: 2}
	l, err := pipeline.New(context.Background(), &pipeline.SliceSource{Rows: rows, BlockSize: 8}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := drain(t, l)
	l.Close()
	defer release(want)
	s, err := c.Open(context.Background(), "synth", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := drain(t, s)
	defer release(got)
	sameBatches(t, want, got)
}

// Issue 30 item 4: a refusal quotes at most a short prefix of a client's
// value, whichever check refuses it, so a 10 MB value never comes back as a
// 10 MB error.
func TestRefusalsQuoteAShortPrefix(t *testing.T) {
	const maxEcho = 512
	big := strings.Repeat("x", 10<<20)
	for _, tc := range []struct {
		name, ticket, want string
	}{
		{"masks", `{"version":1,"masks":"` + big + `"}`, `masks "xxxx`},
		{"shards with a backslash", `{"version":1,"shards":"\\` + big + `"}`, `shards "\\xxx`},
		{"shards leaving the root", `{"version":1,"shards":"../` + big + `"}`, `shards "../xxx`},
		{"unknown field", `{"version":1,"` + big + `":1}`, `unknown field "xxx`},
		{"huge number", `{"version":1,"rank":1` + strings.Repeat("0", 10<<20) + `}`, "rank"},
		{"string for a number", `{"version":1,"rank":"` + big + `"}`, "rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.ticket))
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %.300v, want ErrBadRequest mentioning %q", err, tc.want)
			}
			if n := len(err.Error()); n > maxEcho {
				t.Errorf("error of %d bytes, want at most %d: %.300s…", n, maxEcho, err)
			}
		})
	}

	// Over Flight, through every refusal the server sends: the parser's, the
	// shard root's and the not-found answer.
	srv := startServer(t, nil, ServerConfig{Root: t.TempDir()})
	c := client(t, ClientConfig{Addr: srv.addr})
	for _, tk := range []string{
		`{"version":1,"masks":"` + big + `"}`,
		`{"version":1,"shards":"a/` + big + `"}`,
	} {
		st, err := c.fc.DoGet(context.Background(), &flight.Ticket{Ticket: []byte(tk)})
		if err == nil {
			_, err = st.Recv()
		}
		msg := status.Convert(err).Message()
		if err == nil || len(msg) > maxEcho {
			t.Errorf("ticket %.40s…: %d-byte refusal, want at most %d: %.300s", tk, len(msg), maxEcho, msg)
		}
	}
}
