package cli

import (
	"context"
	"net"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline/remote"
)

func peersDNSFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "peers-dns", Usage: "find the servers sharing the ranks by resolving `NAME:PORT` " +
		"(a Kubernetes headless Service) on each GetFlightInfo, instead of --peer"}
}

// peerSource turns --peers-dns into the server's peer lookup; nil without
// it (the --peer list, if any, is used).
func peerSource(c *ucli.Command, tls bool) (func(context.Context) ([]string, error), error) {
	hp := c.String("peers-dns")
	if hp == "" {
		return nil, nil
	}
	if len(c.StringSlice("peer")) > 0 {
		return nil, usagef("--peers-dns and --peer are alternatives: give one")
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" || port == "" {
		return nil, usagef("--peers-dns %q: want NAME:PORT", hp)
	}
	scheme := "grpc"
	if tls {
		scheme = "grpc+tls"
	}
	return remote.DNSPeers(host, port, scheme), nil
}
