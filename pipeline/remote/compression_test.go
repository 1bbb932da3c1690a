package remote

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/segpipe/segpipe/pipeline"
)

var compressions = []string{CompressionNone, CompressionLZ4, CompressionZstd}

func TestCompressionField(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{CompressionNone, true},
		{CompressionLZ4, true},
		{CompressionZstd, true},
		{"none", false}, // no second spelling of the default
		{"ZSTD", false},
		{"lz4_frame", false},
		{"gzip", false},
		{strings.Repeat("z", 5000), false},
	} {
		t.Run(tc.value[:min(len(tc.value), 16)], func(t *testing.T) {
			req := testRequest()
			req.Compression = tc.value
			r, err := ParseRequest(req.Marshal())
			if !tc.ok {
				if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "compression") {
					t.Fatalf("err = %v, want ErrBadRequest naming compression", err)
				}
				if len(err.Error()) > maxErrorMessage {
					t.Fatalf("error of %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil || r.Compression != tc.value {
				t.Fatalf("ParseRequest = %q, %v", r.Compression, err)
			}
			if tc.value == CompressionNone && strings.Contains(string(req.Marshal()), "compression") {
				t.Errorf("an uncompressed request writes the field: %s", req.Marshal())
			}
		})
	}
}

// TestCompressedStreamsMatchLocal: with either codec the records a client
// gets are those of the in-process loader (dump's), byte for byte, dense
// and windowed, delivered expanded or kept windowed; and the stream did
// carry fewer bytes, per the server's counters by transport and
// compression.
func TestCompressedStreamsMatchLocal(t *testing.T) {
	rows := synthRows(t, 16)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	ctx := context.Background()
	for _, masks := range []string{MasksDense, MasksWindowed} {
		req := testRequest()
		req.Masks = masks
		want := local(t, rows, req, 1)
		var kept []arrow.RecordBatch // the uncompressed windowed stream, kept windowed
		for _, comp := range compressions {
			t.Run(masks+"/"+Request{Compression: comp}.compression(), func(t *testing.T) {
				r := req
				r.Compression = comp
				s, err := c.Stream(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				got := drain(t, s)
				s.Close()
				defer release(got)
				sameBatches(t, want, got)
				if masks != MasksWindowed {
					return
				}
				w, err := c.stream(ctx, r, true)
				if err != nil {
					t.Fatal(err)
				}
				win := drain(t, w)
				w.Close()
				if kept == nil {
					kept = win
					return
				}
				defer release(win)
				if len(win) != len(kept) {
					t.Fatalf("%d windowed batches, %d uncompressed", len(win), len(kept))
				}
				for i := range kept {
					if !array.RecordEqual(win[i], kept[i]) {
						t.Fatalf("windowed batch %d differs from the uncompressed stream's", i)
					}
				}
			})
		}
		release(want)
		release(kept)
		plain, plainImages := sentSeries(t, srv.Server, masks, "none")
		for _, comp := range []string{CompressionLZ4, CompressionZstd} {
			b, images := sentSeries(t, srv.Server, masks, comp)
			if images == 0 || images != plainImages {
				t.Errorf("%s/%s: %v images counted, %v uncompressed", masks, comp, images, plainImages)
			}
			if b/images >= plain/plainImages {
				t.Errorf("%s/%s: %.0f bytes an image, uncompressed %.0f: not compressed", masks, comp, b/images, plain/plainImages)
			}
		}
	}
}

// sentSeries reads the bytes and images sent with a mask transport and
// compression from the server's registry.
func sentSeries(t *testing.T, s *Server, masks, comp string) (bytes, images float64) {
	t.Helper()
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "masks":
					labels[0] = l.GetValue()
				case "compression":
					labels[1] = l.GetValue()
				}
			}
			if labels != [2]string{masks, comp} {
				continue
			}
			switch mf.GetName() {
			case "segpipe_serve_transport_bytes_sent_total":
				bytes = m.GetCounter().GetValue()
			case "segpipe_serve_transport_images_sent_total":
				images = m.GetCounter().GetValue()
			}
		}
	}
	return bytes, images
}

// TestCompressedLargeBatchesStockReader: batches whose buffers are sent by
// reference, compressed with either codec, reach this package's client and
// arrow-go's own Flight reader as the served batch.
func TestCompressedLargeBatchesStockReader(t *testing.T) {
	rec := preparedBatch(t, 4, 256, 4)
	defer rec.Release()
	srv := startServer(t, synthRows(t, 8), ServerConfig{newBatches: func(context.Context, pipeline.Source, pipeline.Config) (pipeline.Batches, error) {
		return &repeater{rec: rec}, nil
	}})
	c := client(t, ClientConfig{Addr: srv.addr})
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 3
	for _, comp := range []string{CompressionLZ4, CompressionZstd} {
		t.Run(comp, func(t *testing.T) {
			req := Request{Version: RequestVersion, Shards: "synth", ImgSz: 256, BatchSize: 4, Limit: n, Compression: comp}
			s, err := c.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, s)
			s.Close()
			defer release(got)
			if len(got) != n {
				t.Fatalf("%d batches, want %d", len(got), n)
			}
			for i, r := range got {
				if !array.RecordEqual(r, rec) {
					t.Errorf("batch %d differs from the served batch", i)
				}
			}
			stockReaderGets(t, conn, req, rec, n)
		})
	}
}

// TestOpenAsksForTheClientsCompression: Open and OpenWindowed carry
// ClientConfig.Compression into their tickets, and refuse a bad one before
// connecting.
func TestOpenAsksForTheClientsCompression(t *testing.T) {
	rows := synthRows(t, 8)
	srv := startServer(t, rows, ServerConfig{})
	req := testRequest()
	cfg, err := req.Config(pipeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, ClientConfig{Addr: srv.addr, Compression: CompressionZstd})
	s, err := c.Open(context.Background(), "synth", cfg)
	if err != nil {
		t.Fatal(err)
	}
	release(drain(t, s))
	s.Close()
	if s.req.Compression != CompressionZstd {
		t.Errorf("Open asked for compression %q", s.req.Compression)
	}
	if _, images := sentSeries(t, srv.Server, MasksWindowed, CompressionZstd); images == 0 {
		t.Errorf("the server counted no zstd image")
	}
	bad := client(t, ClientConfig{Addr: srv.addr, Compression: "brotli"})
	if _, err := bad.Open(context.Background(), "synth", cfg); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Open with compression brotli: %v, want ErrBadRequest", err)
	}
}

// FuzzParseRequestCompression: a ticket's compression is accepted exactly
// when it is one of the three names, and survives Marshal.
func FuzzParseRequestCompression(f *testing.F) {
	for _, s := range []string{"", "lz4", "zstd", "none", "ZSTD", "lz4\x00", "zstd ", strings.Repeat("é", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, comp string) {
		req := testRequest()
		req.Compression = comp
		r, err := ParseRequest(req.Marshal())
		valid := comp == CompressionNone || comp == CompressionLZ4 || comp == CompressionZstd
		if valid != (err == nil) {
			t.Fatalf("compression %q: err %v", comp, err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || len(err.Error()) > maxErrorMessage {
				t.Fatalf("compression %.80q: %v", comp, err)
			}
			return
		}
		if r.Compression != comp || len(r.writerOptions()) != map[bool]int{true: 0, false: 1}[comp == CompressionNone] {
			t.Fatalf("compression %q parsed as %q", comp, r.Compression)
		}
	})
}
