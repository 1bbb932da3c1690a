package remote

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/segpipe/segpipe/pipeline"
)

// TestLargeBatchesInPlaceAndStockReader serves batches large enough for the
// by-reference send and the padded, aligned body: this package's client must
// use the bodies where gRPC read them and still get the served batches
// byte for byte (while it holds several at once), and arrow-go's own Flight
// reader must read the same stream.
func TestLargeBatchesInPlaceAndStockReader(t *testing.T) {
	rec := preparedBatch(t, 4, 256, 4) // ~0.9 MB of Arrow buffers
	defer rec.Release()
	srv := startServer(t, synthRows(t, 8), ServerConfig{newBatches: func(context.Context, pipeline.Source, pipeline.Config) (pipeline.Batches, error) {
		return &repeater{rec: rec}, nil
	}})
	const n = 6
	req := Request{Version: RequestVersion, Shards: "synth", ImgSz: 256, BatchSize: 4, Limit: n}

	c := client(t, ClientConfig{Addr: srv.addr})
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []arrow.RecordBatch
	for range n {
		r, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	s.Close()
	for i, r := range got {
		if !array.RecordEqual(r, rec) {
			t.Errorf("batch %d differs from the served batch", i)
		}
		r.Release()
	}
	if k := c.arena.inPlace.Load(); k == 0 {
		t.Errorf("no body of %d large batches was used in place", n)
	}

	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stockReaderGets(t, conn, req, rec, n)
}

// stockReaderGets reads req's stream with arrow-go's own Flight reader over
// conn and checks that it holds n batches, each equal to want.
func stockReaderGets(t *testing.T, conn *grpc.ClientConn, req Request, want arrow.RecordBatch, n int) {
	t.Helper()
	st, err := flight.NewFlightServiceClient(conn).DoGet(context.Background(), &flight.Ticket{Ticket: req.Marshal()})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(st)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	k := 0
	for rdr.Next() {
		if !array.RecordEqual(rdr.RecordBatch(), want) {
			t.Errorf("stock reader: batch %d differs from the served batch", k)
		}
		k++
	}
	if err := rdr.Err(); err != nil || k != n {
		t.Fatalf("stock reader: %d batches (want %d), %v", k, n, err)
	}
}
