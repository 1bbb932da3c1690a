package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
)

func TestHostPorts(t *testing.T) {
	for _, c := range []struct {
		ips  []string
		want []string
	}{
		{[]string{"10.0.0.2", "10.0.0.10", "10.0.0.1"}, []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.10:80"}},
		{[]string{"::1", "127.0.0.1"}, []string{"127.0.0.1:80"}},
		{[]string{"fd00::2", "fd00::1", "fd00::1"}, []string{"[fd00::1]:80", "[fd00::2]:80"}},
		{[]string{"::ffff:10.0.0.3", "10.0.0.3", "garbage"}, []string{"10.0.0.3:80"}},
	} {
		if got := hostPorts(c.ips, "80"); !slices.Equal(got, c.want) {
			t.Errorf("hostPorts(%v) = %v, want %v", c.ips, got, c.want)
		}
	}
}

func TestFleetAddrs(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]string, error) {
		switch host {
		case "fleet.example":
			return []string{"10.1.0.3", "10.1.0.1", "10.1.0.2"}, nil
		case "one.example":
			return []string{"10.2.0.1", "fd00::1"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for _, c := range []struct {
		addr string
		want []string
		err  string
	}{
		{"127.0.0.1:8815", []string{"127.0.0.1:8815"}, ""},
		{"a:1, b:2,c:3", []string{"a:1", "b:2", "c:3"}, ""},
		{"fleet.example:8815", []string{"10.1.0.1:8815", "10.1.0.2:8815", "10.1.0.3:8815"}, ""},
		{"one.example:8815", []string{"one.example:8815"}, ""},
		{"missing.example:8815", []string{"missing.example:8815"}, ""},
		{"a:1,b", nil, `"b" in address list`},
	} {
		got, err := fleetAddrs(ClientConfig{Addr: c.addr, lookupHost: lookup})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.addr, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v, %v; want %v", c.addr, got, err, c.want)
		}
	}
}

// startFleet starts n servers of rows on loopback.
func startFleet(t *testing.T, rows []shard.Image, n int) []*testServer {
	out := make([]*testServer, n)
	for i := range out {
		out[i] = startServer(t, rows, ServerConfig{})
	}
	return out
}

func fleetAddr(srvs []*testServer) string {
	var a []string
	for _, s := range srvs {
		a = append(a, s.addr)
	}
	return strings.Join(a, ",")
}

func TestFleetSpreadsRanksAndFailsOverBitIdentical(t *testing.T) {
	rows := synthRows(t, 36)
	srvs := startFleet(t, rows, 3)
	// A small window keeps the server mid-stream while the client reads.
	c := client(t, ClientConfig{Addr: fleetAddr(srvs), Backoff: 5 * time.Millisecond, WindowBytes: 64 << 10})
	for rank := range 3 {
		req := testRequest()
		req.Masks, req.Rank, req.WorldSize, req.Epochs, req.Limit = MasksWindowed, rank, 3, 1000, 12
		want := local(t, rows, req, 1)
		before := streamCounts(srvs)
		s, err := c.Stream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var got []arrow.RecordBatch
		for i := 0; ; i++ {
			if i == 3 {
				after := streamCounts(srvs)
				for k := range srvs {
					want := int64(0)
					if k == rank {
						want = 1
					}
					if d := after[k] - before[k]; d != want {
						t.Errorf("rank %d: server %d started %d streams, want %d", rank, k, d, want)
					}
				}
				// The rank's server goes away mid-stream; the next one
				// takes over from the last delivered state.
				srvs[rank].Stop()
			}
			rec, err := s.Next(context.Background())
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("rank %d batch %d: %v", rank, i, err)
			}
			got = append(got, rec)
		}
		s.Close()
		if n := streamCounts(srvs)[(rank+1)%3] - before[(rank+1)%3]; n != 1 {
			t.Errorf("rank %d: the next server took %d streams, want 1", rank, n)
		}
		sameBatches(t, want, got)
		release(want)
		release(got)
		srvs[rank] = startServerAt(t, rows, srvs[rank].addr)
	}
}

func streamCounts(srvs []*testServer) []int64 {
	out := make([]int64, len(srvs))
	for i, s := range srvs {
		out[i] = s.streams.Load()
	}
	return out
}

// startServerAt serves rows on addr (a server restarted in place, or one
// of several on one port of several loopback addresses), with cfg's TLS.
func startServerAt(t *testing.T, rows []shard.Image, addr string, cfg ...ServerConfig) *testServer {
	t.Helper()
	var c ServerConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.Logger, c.Loader = slog.New(slog.DiscardHandler), pipeline.Config{Workers: 2}
	c.Open = func(context.Context, string) (pipeline.Source, error) {
		return &pipeline.SliceSource{Rows: rows, BlockSize: 8}, nil
	}
	s, err := NewServer(c)
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	eventually(t, "listen on "+addr, 5*time.Second, func() bool {
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return &testServer{Server: s, addr: lis.Addr().String()}
}

// loopbackFleet starts three servers on one port of 127.0.0.1, .2 and .3,
// as a headless Service's pods; nil where the loopback has only .1.
func loopbackFleet(t *testing.T, rows []shard.Image, cfg ServerConfig) []*testServer {
	for attempt := 0; attempt < 5; attempt++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
		lis.Close()
		got := []*testServer{startServerAt(t, rows, "127.0.0.1:"+port, cfg)}
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			if l, err := net.Listen("tcp", ip+":"+port); err == nil {
				l.Close()
				got = append(got, startServerAt(t, rows, ip+":"+port, cfg))
			}
		}
		if len(got) == 3 {
			return got
		}
		for _, s := range got {
			s.Stop()
		}
	}
	return nil
}

// loopbackLookup resolves any name to the loopback fleet's addresses, in
// no particular order and with an IPv6 address to ignore.
func loopbackLookup(context.Context, string) ([]string, error) {
	return []string{"127.0.0.3", "::1", "127.0.0.1", "127.0.0.2"}, nil
}

func TestFleetOverTLSVerifiesTheName(t *testing.T) {
	rows := synthRows(t, 8)
	cert, pool := selfSignedFor(t, []string{"loaders.test"}, nil)
	srvs := loopbackFleet(t, rows, ServerConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if srvs == nil {
		t.Skip("cannot listen on 127.0.0.2 and 127.0.0.3 here")
	}
	_, port, _ := net.SplitHostPort(srvs[0].addr)
	req := testRequest()
	req.Limit = 2
	// The certificate names the Service, not the pods' addresses.
	c := client(t, ClientConfig{Addr: "loaders.test:" + port, TLS: &tls.Config{RootCAs: pool}, lookupHost: loopbackLookup})
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	release(drain(t, s))
	s.Close()
	bad := client(t, ClientConfig{Addr: "other.test:" + port, TLS: &tls.Config{RootCAs: pool}, lookupHost: loopbackLookup, Retries: -1})
	if _, err := bad.Stream(context.Background(), req); err == nil {
		t.Error("a certificate for loaders.test was accepted for other.test")
	}
}

func TestFleetFromOneNameResolvingToSeveral(t *testing.T) {
	rows := synthRows(t, 16)
	// Loopback answers on all of 127/8: three servers on one port of
	// three addresses, as a headless Service's pods.
	srvs := loopbackFleet(t, rows, ServerConfig{})
	if srvs == nil {
		t.Skip("cannot listen on 127.0.0.2 and 127.0.0.3 here")
	}
	_, port, _ := net.SplitHostPort(srvs[0].addr)
	c := client(t, ClientConfig{Addr: "loaders.test:" + port, Backoff: 5 * time.Millisecond, lookupHost: loopbackLookup})
	req := testRequest()
	req.Rank, req.WorldSize = 4, 6
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	// Rank 4 of the sorted 127.0.0.1, .2, .3 starts on .2.
	for i, srv := range srvs {
		if n, want := srv.streams.Load(), int64(min(i%2, 1)); n != want {
			t.Errorf("server %d (%s) started %d streams, want %d: rank 4 belongs on 127.0.0.2", i, srv.addr, n, want)
		}
	}
	want := local(t, rows, req, 1)
	defer release(want)
	got := drain(t, s)
	defer release(got)
	sameBatches(t, want[1:], got)
}

func TestFleetAllServersGone(t *testing.T) {
	rows := synthRows(t, 8)
	srvs := startFleet(t, rows, 2)
	c := client(t, ClientConfig{Addr: fleetAddr(srvs), Retries: 2, Backoff: time.Millisecond})
	req := testRequest()
	req.Epochs = 1000
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, srv := range srvs {
		srv.Stop()
	}
	for i := 0; err == nil && i < 1000; i++ {
		var rec arrow.RecordBatch
		if rec, err = s.Next(context.Background()); err == nil {
			rec.Release()
		}
	}
	if err == nil || !strings.Contains(err.Error(), "2 reconnect attempts failed") {
		t.Fatalf("err = %v, want a clear error after 2 rounds", err)
	}
	// Opening fails the same way, after trying every server.
	if _, err := c.Stream(context.Background(), req); err == nil {
		t.Fatal("Stream on a fleet with no server up succeeded")
	}
	if _, err := c.Dataset(context.Background(), "synth"); err == nil || !strings.Contains(err.Error(), "no server of the fleet answered") {
		t.Fatalf("Dataset: %v", err)
	}
}

func TestFlightInfoListsEveryPeer(t *testing.T) {
	peers := []string{"grpc://10.0.0.1:8815", "grpc://10.0.0.2:8815", "grpc://10.0.0.3:8815"}
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
		err  bool
	}{
		{"flag", ServerConfig{Peers: peers}, false},
		{"lookup", ServerConfig{PeerSource: func(context.Context) ([]string, error) { return peers, nil }}, false},
		{"lookup fails", ServerConfig{PeerSource: func(context.Context) ([]string, error) { return nil, errors.New("no such host") }}, true},
	} {
		srv := startServer(t, synthRows(t, 8), tc.cfg)
		c := client(t, ClientConfig{Addr: srv.addr, Retries: -1})
		req := testRequest()
		req.Rank, req.WorldSize = 4, 6
		info, err := c.Info(context.Background(), req)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "no such host") || !retryable(errors.Unwrap(err)) {
				t.Errorf("%s: %v, want a retryable error naming the cause", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range info.Endpoint[0].Location {
			got = append(got, l.Uri)
		}
		if want := []string{peers[1], peers[2], peers[0]}; !slices.Equal(got, want) {
			t.Errorf("%s: rank 4 locations %v, want %v", tc.name, got, want)
		}
	}
}

func TestDNSPeersResolves(t *testing.T) {
	peers, err := DNSPeers("localhost", "8815", "grpc+tls")(context.Background())
	if err != nil {
		t.Skipf("localhost does not resolve here: %v", err)
	}
	if !slices.Equal(peers, []string{"grpc+tls://127.0.0.1:8815"}) && !slices.Equal(peers, []string{"grpc+tls://[::1]:8815"}) {
		t.Errorf("localhost peers %v", peers)
	}
}
