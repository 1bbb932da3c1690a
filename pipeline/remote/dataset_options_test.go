package remote

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
)

// The dataset options travel in the ticket under Ultralytics' names and
// come out as the loader's settings; NewRequest is their inverse.
func TestRequestCarriesTheDatasetOptions(t *testing.T) {
	r, err := ParseRequest([]byte(`{"version":1,"shards":"s","classes":[2,0],"single_cls":true,"fraction":0.25}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config(pipeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Classes, []int32{2, 0}) || !cfg.SingleClass || cfg.Fraction != 0.25 {
		t.Fatalf("config classes %v single %v fraction %v", cfg.Classes, cfg.SingleClass, cfg.Fraction)
	}
	back, err := NewRequest("s", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Classes, r.Classes) || back.SingleClass != r.SingleClass || back.Fraction != r.Fraction {
		t.Fatalf("NewRequest gave %+v", back)
	}
	// Unset, they are left out of the ticket: today's tickets are unchanged.
	if got, want := string(testRequest().Marshal()), string(mustParse(t, testRequest().Marshal()).Marshal()); got != want {
		t.Fatalf("round trip %s != %s", got, want)
	}
	for _, bad := range []string{
		`{"version":1,"shards":"s","fraction":1.5}`,
		`{"version":1,"shards":"s","fraction":-0.5}`,
		`{"version":1,"shards":"s","fraction":"half"}`,
		`{"version":1,"shards":"s","classes":[-1]}`,
		`{"version":1,"shards":"s","classes":3}`,
		`{"version":1,"shards":"s","classes":[1.5]}`,
		`{"version":1,"shards":"s","single_cls":1}`,
	} {
		if _, err := ParseRequest([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", bad, err)
		}
	}
}

func mustParse(t *testing.T, b []byte) Request {
	t.Helper()
	r, err := ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A served stream honours the options as the loader in this process does,
// batch for batch.
func TestServedStreamHonoursTheDatasetOptions(t *testing.T) {
	rows := synthRows(t, 12)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	req := testRequest()
	req.Epochs, req.CloseMosaic, req.Val = 1, 0, true
	req.Classes, req.SingleClass, req.Fraction = []int32{2}, true, 0.5
	want := local(t, rows, req, 1)
	defer release(want)
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, s)
	defer release(got)
	s.Close()
	sameBatches(t, want, got)
	var images, instances int
	for _, rec := range got {
		var cols batch.Columns
		if err := batch.ColumnsOf(rec, &cols); err != nil {
			t.Fatal(err)
		}
		images += cols.N
		for _, cls := range arrow.Int32Traits.CastFromBytes(cols.Classes.Bytes()) {
			if cls != 0 {
				t.Fatalf("class %d under single_cls", cls)
			}
			instances++
		}
	}
	// Half the rows, one instance each (the triangle, class 2).
	if images != 6 || instances != 6 {
		t.Fatalf("%d images, %d instances: want 6 images of one instance each", images, instances)
	}
}

// FuzzParseRequestDatasetOptions: tickets with the dataset options parse
// or fail with ErrBadRequest, and an accepted one round-trips.
func FuzzParseRequestDatasetOptions(f *testing.F) {
	f.Add([]byte(`{"version":1,"shards":"s","classes":[2,0,2],"single_cls":true,"fraction":0.25}`))
	f.Add([]byte(`{"version":1,"shards":"s","classes":[],"fraction":1}`))
	f.Add([]byte(`{"version":1,"shards":"s","classes":[2147483648]}`))
	f.Add([]byte(`{"version":1,"shards":"s","fraction":1e-300}`))
	f.Add([]byte(`{"version":1,"shards":"s","fraction":-0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error without ErrBadRequest: %v", err)
			}
			return
		}
		r2, err := ParseRequest(r.Marshal())
		if err != nil || string(r2.Marshal()) != string(r.Marshal()) {
			t.Fatalf("accepted request does not round-trip: %v", err)
		}
	})
}
