package remote

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
)

// Issue 35: a 100 kB shards value of "val/././…" was accepted and echoed
// back in FlightInfo. A shard set name over MaxShardsLen bytes is refused;
// a shorter one is cleaned, and FlightInfo echoes the clean spelling.
func TestShardsMustBeCleanAndBounded(t *testing.T) {
	dots := "val" + strings.Repeat("/.", 50_000)
	for _, tc := range []struct {
		name, shards string
		want         string // "" accepted
	}{
		{"plain", "val", ""},
		{"nested", "coco/val2017", ""},
		{"root, empty", "", ""},
		{"root, dot", ".", ""},
		{"at the limit", strings.Repeat("a", MaxShardsLen), ""},
		{"100 kB of ./", dots, "over the limit of 1024 bytes"},
		{"over the limit", strings.Repeat("a", MaxShardsLen+1), "over the limit"},
		{"dot segment", "val/./x", ""},
		{"leading dot", "./val", ""},
		{"trailing slash", "val/", ""},
		{"double slash", "a//b", ""},
		{"short dots", "val/././.", ""},
		{"parent", "a/../b", "leaves the shard root"},
		{"absolute", "/val", "relative to the shard root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{Version: RequestVersion, Shards: tc.shards}
			_, err := ParseRequest(r.Marshal())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %.300v, want ErrBadRequest saying %q", err, tc.want)
			}
			if len(err.Error()) > 512 {
				t.Errorf("%d-byte error", len(err.Error()))
			}
		})
	}

	// Over Flight: refused as InvalidArgument with a short message, and
	// what an accepted request's FlightInfo echoes (descriptor, ticket) is
	// the normalised request, whatever the client's bytes were.
	srv := startServer(t, synthRows(t, 8), ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	_, err := c.fc.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorCMD,
		Cmd: []byte(`{"version":1,"shards":"` + dots + `"}`)})
	if status.Code(err) != codes.InvalidArgument || len(status.Convert(err).Message()) > 512 {
		t.Errorf("100 kB of ./: %.300v, want a short InvalidArgument", err)
	}
	padded := []byte(`{"version":1,` + strings.Repeat(" ", 100_000) + `"shards":"synth"}`)
	info, err := c.fc.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: padded})
	if err != nil {
		t.Fatal(err)
	}
	want := Request{Version: RequestVersion, Shards: "synth"}.Marshal()
	if got := info.GetFlightDescriptor().GetCmd(); string(got) != string(want) {
		t.Errorf("descriptor echoed as %d bytes %.100q, want the normalised request %s", len(got), got, want)
	}
	if got := info.Endpoint[0].Ticket.Ticket; string(got) != string(want) {
		t.Errorf("ticket %.100q, want %s", got, want)
	}
	// An unclean spelling of the set is echoed clean.
	info, err = c.fc.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorCMD,
		Cmd: []byte(`{"version":1,"shards":"./synth//."}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := info.GetFlightDescriptor().GetCmd(); string(got) != string(want) {
		t.Errorf("./synth//. echoed as %.100q, want %s", got, want)
	}
}

// Issue 35: max_memory=-5 was taken as "no budget" by the Python loader.
// A ticket has no memory field (the server's budget is its own): any
// max_memory in one is refused as an unknown field, never applied.
func TestTicketsCarryNoMemoryBudget(t *testing.T) {
	for _, v := range []string{"-5", "0", "1073741824"} {
		_, err := ParseRequest([]byte(`{"version":1,"shards":"synth","max_memory":` + v + `}`))
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `unknown field "max_memory"`) {
			t.Errorf("max_memory %s: %v, want an unknown-field refusal", v, err)
		}
	}
}

// Issue 35: a call with two authorization headers was accepted if either
// held the token. More than one value is refused, whatever they hold.
func TestSeveralAuthorizationValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		ok     bool
	}{
		{"one right", []string{"Bearer s3cret"}, true},
		{"wrong then right", []string{"Bearer wrong", "Bearer s3cret"}, false},
		{"right then wrong", []string{"Bearer s3cret", "Bearer wrong"}, false},
		{"right twice", []string{"Bearer s3cret", "Bearer s3cret"}, false},
	} {
		md := metadata.MD{"authorization": tc.values}
		err := checkToken(metadata.NewIncomingContext(context.Background(), md), "s3cret")
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want accepted %v", tc.name, err, tc.ok)
		}
		if err != nil && len(tc.values) > 1 && (status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "2 authorization headers")) {
			t.Errorf("%s: %v, want Unauthenticated naming the two headers", tc.name, err)
		}
	}

	// Over Flight: the client's own header and one more.
	srv := startServer(t, synthRows(t, 8), ServerConfig{Token: "s3cret"})
	c := client(t, ClientConfig{Addr: srv.addr, Token: "s3cret"})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong")
	req := testRequest()
	_, err := c.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: req.Marshal()})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "authorization headers") {
		t.Errorf("GetFlightInfo with two authorization headers: %v, want Unauthenticated", err)
	}
	st, err := c.fc.DoGet(ctx, &flight.Ticket{Ticket: req.Marshal()})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("DoGet with two authorization headers: %v, want Unauthenticated", err)
	}
	if _, err := c.Info(context.Background(), req); err != nil {
		t.Errorf("one right header refused: %v", err)
	}
}

// Issue 35: a 0-row shard set was served as an empty stream, which a
// trainer takes for an epoch done. GetFlightInfo and DoGet refuse it with
// FailedPrecondition naming the set as the client named it, whether the
// set is a shard directory (its manifest lists no rows) or an Open
// function's source without rows.
func TestEmptySetIsRefusedNamingIt(t *testing.T) {
	root := t.TempDir()
	w, err := shard.Create(filepath.Join(root, "empty"), shard.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	fromRoot := startServer(t, nil, ServerConfig{Root: root})
	fromOpen := startServer(t, nil, ServerConfig{Open: func(context.Context, string) (pipeline.Source, error) {
		return &pipeline.SliceSource{BlockSize: 8}, nil
	}})
	for _, srv := range []*testServer{fromRoot, fromOpen} {
		c := client(t, ClientConfig{Addr: srv.addr})
		req := Request{Version: RequestVersion, Shards: "empty", BatchSize: 4, ImgSz: 64}
		_, ierr := c.fc.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: req.Marshal()})
		st, err := c.fc.DoGet(context.Background(), &flight.Ticket{Ticket: req.Marshal()})
		if err == nil {
			_, err = st.Recv()
		}
		for what, err := range map[string]error{"GetFlightInfo": ierr, "DoGet": err} {
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, `shard set "empty"`) || !strings.Contains(msg, "no rows") {
				t.Errorf("%s of a 0-row set: %v, want FailedPrecondition naming the set", what, err)
			}
			if strings.Contains(msg, root) {
				t.Errorf("%s: the answer names the server's directory: %s", what, msg)
			}
		}
		if _, err := c.Stream(context.Background(), req); status.Code(errors.Unwrap(err)) != codes.FailedPrecondition {
			t.Errorf("Stream of a 0-row set: %v, want FailedPrecondition", err)
		}
		if srv.ActiveStreams() != 0 {
			t.Errorf("%d streams running after the refusals", srv.ActiveStreams())
		}
	}
}
