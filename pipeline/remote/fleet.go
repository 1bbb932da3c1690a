package remote

// A fleet is several segpipe servers over the same shards. A loader is
// deterministic from its resume state, so every server produces the same
// batches for a request: the client spreads ranks over the servers (rank r
// starts at server r mod n, the order GetFlightInfo's locations use) and,
// when a server goes away, reopens the stream on the next one from the
// state of the last batch it delivered. The batches that follow are those
// the lost server would have sent, bit for bit. A stream stays where it
// failed over to; once every server has failed in a row since its last
// batch, it backs off (ClientConfig.Backoff) before going round again, and
// fails after ClientConfig.Retries rounds.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type fleet struct {
	members []*Client
}

// fleetPos is a stream's place in a fleet.
type fleetPos struct {
	f      *fleet
	member int   // index of the server now serving the stream
	hops   int   // failovers since the stream last delivered
	from   int64 // delivered count when hops started counting
}

// lookupTimeout bounds the DNS lookup NewClient makes for a host name.
const lookupTimeout = 5 * time.Second

// fleetAddrs lists the servers cfg.Addr names: the elements of a
// comma-separated list as given, or the addresses one host name resolves
// to (IPv4 when it has any, else IPv6, so a dual-stack host or "localhost"
// does not count twice), sorted so that every client and server that
// resolves the name numbers the servers alike. One address, or a name
// that does not resolve, is a single server (gRPC reports the failure on
// use, as before).
func fleetAddrs(cfg ClientConfig) ([]string, error) {
	if strings.Contains(cfg.Addr, ",") {
		var out []string
		for a := range strings.SplitSeq(cfg.Addr, ",") {
			a = strings.TrimSpace(a)
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("remote: %q in address list %q: %w", a, cfg.Addr, err)
			}
			out = append(out, a)
		}
		return out, nil
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return []string{cfg.Addr}, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return []string{cfg.Addr}, nil
	}
	lookup := cfg.lookupHost
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ips, err := lookup(ctx, host)
	if err != nil {
		return []string{cfg.Addr}, nil
	}
	if hp := hostPorts(ips, port); len(hp) > 1 {
		return hp, nil
	}
	return []string{cfg.Addr}, nil
}

// hostPorts joins one family of ips (IPv4 when there are any) with port,
// in address order.
func hostPorts(ips []string, port string) []string {
	var v4, v6 []netip.Addr
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
		case a.Unmap().Is4():
			v4 = append(v4, a.Unmap())
		default:
			v6 = append(v6, a)
		}
	}
	use := v4
	if len(use) == 0 {
		use = v6
	}
	slices.SortFunc(use, func(a, b netip.Addr) int { return a.Compare(b) })
	use = slices.Compact(use)
	out := make([]string, len(use))
	for i, a := range use {
		out[i] = net.JoinHostPort(a.String(), port)
	}
	return out
}

// newFleetClient makes one Client per server. Servers reached by the
// address a name resolved to are verified under that name with TLS.
func newFleetClient(cfg ClientConfig, addrs []string, err error) (*Client, error) {
	if err != nil {
		return nil, err
	}
	if cfg.TLS != nil && cfg.TLS.ServerName == "" && !strings.Contains(cfg.Addr, ",") {
		if host, _, err := net.SplitHostPort(cfg.Addr); err == nil {
			cfg.TLS = cfg.TLS.Clone()
			cfg.TLS.ServerName = host
		}
	}
	f := &fleet{}
	for _, a := range addrs {
		m := cfg
		m.Addr = a
		c, err := newClient(m)
		if err != nil {
			f.close()
			return nil, err
		}
		f.members = append(f.members, c)
	}
	return &Client{cfg: cfg.withDefaults(), fleet: f}, nil
}

func (f *fleet) close() error {
	var errs []error
	for _, m := range f.members {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// home is the server a rank starts on.
func (f *fleet) home(rank int) int { return rank % len(f.members) }

// place puts a new stream on its rank's server; a nil fleet leaves it.
func (f *fleet) place(s *Stream) {
	if f == nil {
		return
	}
	s.fl = fleetPos{f: f, member: f.home(s.req.Rank)}
	s.c = f.members[s.fl.member]
}

// info asks the rank's server, then the others in turn, for the flight
// info; an answer (not a transport failure) is returned at once.
func (f *fleet) info(ctx context.Context, req Request) (*flight.FlightInfo, error) {
	var errs []error
	for k := range f.members {
		m := f.members[(f.home(req.Rank)+k)%len(f.members)]
		info, err := m.Info(ctx, req)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return info, err
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("remote: no server of the fleet answered: %w", errors.Join(errs...))
}

// failover moves a stream whose server failed (a transport error) to the
// next server, until every other server has been tried since the stream's
// last batch; then it returns false so that Next backs off and counts a
// retry before the next round.
func (s *Stream) failover(err error) bool {
	p := &s.fl
	if p.f == nil || !retryable(err) || s.ctx.Err() != nil {
		return false
	}
	if s.delivered != p.from {
		p.hops, p.from = 0, s.delivered
	}
	n := len(p.f.members)
	if p.hops >= n-1 {
		p.hops = 0
		return false
	}
	p.hops++
	from := s.c.cfg.Addr
	p.member = (p.member + 1) % n
	s.c = p.f.members[p.member]
	s.c.cfg.Logger.Warn("server lost, failing over", "from", from, "to", s.c.cfg.Addr, "rank", s.req.Rank,
		"batches", s.delivered, "err", err)
	return true
}

// Server side: where GetFlightInfo sends each rank.

// locations lists every server of the fleet for rank's stream, its home
// server first and then the others in the order a client fails over in;
// nil when the server knows no peers (the endpoint is this server). A
// failed peer lookup is Unavailable, which clients retry.
func (s *Server) locations(ctx context.Context, rank int) ([]*flight.Location, error) {
	peers := s.cfg.Peers
	if s.cfg.PeerSource != nil {
		var err error
		if peers, err = s.cfg.PeerSource(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "segpipe serve: finding the fleet's servers: %v", err)
		}
	}
	if len(peers) == 0 {
		return nil, nil
	}
	out := make([]*flight.Location, len(peers))
	for k := range peers {
		out[k] = &flight.Location{Uri: peers[(rank+k)%len(peers)]}
	}
	return out, nil
}

// DNSPeers returns a ServerConfig.PeerSource that resolves name (a
// Kubernetes headless Service, say) on each call and locates the servers
// at scheme://address:port in the order clients resolving the same name
// use (see fleet.go). scheme is "grpc" or "grpc+tls".
func DNSPeers(name, port, scheme string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		ips, err := net.DefaultResolver.LookupHost(ctx, name)
		if err != nil {
			return nil, err
		}
		hp := hostPorts(ips, port)
		if len(hp) == 0 {
			return nil, fmt.Errorf("%s resolves to no IP address", name)
		}
		out := make([]string, len(hp))
		for i, a := range hp {
			out[i] = scheme + "://" + a
		}
		return out, nil
	}
}
