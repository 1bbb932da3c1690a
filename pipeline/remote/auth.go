package remote

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// checkToken compares the request's "authorization: Bearer T" header with
// the token in constant time (the length is not secret). The scheme is
// case-insensitive and may be followed by several spaces (RFC 7235); the
// token is exact. A call carrying more than one authorization value is
// refused whatever they hold: with several, "one of them matches" would let
// a caller probe tokens in batches, and a proxy that adds its own header
// would decide access by accident.
func checkToken(ctx context.Context, token string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) > 1 {
		return status.Errorf(codes.Unauthenticated, "segpipe serve: %d authorization headers; send exactly one, \"authorization: Bearer <token>\"", len(vals))
	}
	for _, v := range vals {
		scheme, got, ok := strings.Cut(v, " ")
		got = strings.TrimLeft(got, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "segpipe serve: missing or wrong bearer token")
}

func authInterceptors(token string, refused func(string)) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := checkToken(ctx, token); err != nil {
				refused("auth")
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := checkToken(ss.Context(), token); err != nil {
				refused("auth")
				return err
			}
			return h(srv, ss)
		}),
	}
}

// bearer is the client side: it attaches the token to every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false on plaintext connections so that a
// token also works on loopback without TLS (the server only accepts
// plaintext with a token when told to listen there).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Listen opens a TCP listener for the server. Without authentication it
// refuses any address that is not loopback (127.0.0.0/8, ::1, localhost)
// unless allowRemote is set: an open data server should be a decision, not
// a default.
func Listen(addr string, authenticated, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", addr, err)
	}
	if !authenticated && !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("listen %q: without a token segpipe serve listens on loopback only (127.0.0.1, ::1, localhost); set a token or allow remote clients explicitly", addr)
	}
	return net.Listen("tcp", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
