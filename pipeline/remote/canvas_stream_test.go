package remote

import (
	"context"
	"testing"

	"github.com/segpipe/segpipe/formats/batch"
)

// TestServedCanvasStreamsMatchLocal: rect and multi_scale streams, dense
// and windowed, arrive as the loader in this process makes them, the
// canvas column included.
func TestServedCanvasStreamsMatchLocal(t *testing.T) {
	rows := synthRows(t, 12)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	for name, mod := range map[string]func(*Request){
		"rect":                 func(r *Request) { r.Val, r.Epochs, r.CloseMosaic, r.Rect = true, 1, 0, true },
		"rect windowed":        func(r *Request) { r.Val, r.Epochs, r.CloseMosaic, r.Rect, r.Masks = true, 1, 0, true, MasksWindowed },
		"multi_scale":          func(r *Request) { r.MultiScale = 0.5 },
		"multi_scale windowed": func(r *Request) { r.MultiScale, r.Masks = 0.5, MasksWindowed },
	} {
		t.Run(name, func(t *testing.T) {
			req := testRequest()
			mod(&req)
			want := local(t, rows, req, 1)
			s, err := c.Stream(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := drain(t, s)
			s.Close()
			sameBatches(t, want, got)
			for _, rec := range got {
				if _, _, ok, err := batch.LiveCanvas(rec); !ok || err != nil {
					t.Fatalf("%s: live canvas %v %v", name, ok, err)
				}
			}
			release(want)
			release(got)
		})
	}
}
