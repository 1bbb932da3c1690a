// Package s3test runs a real S3-compatible server (versitygw, Apache-2.0)
// on loopback for tests: started per test, stopped at its end, restartable
// in between to test retries. The binary is $SEGPIPE_VERSITYGW or
// versitygw on PATH; without one the test is skipped with a message saying
// how to install it (.ci/run does).
package s3test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Credentials the server is started with; Start puts them in the
// environment, where the AWS SDK looks for them.
const (
	AccessKey = "segpipe-test-access"
	SecretKey = "segpipe-test-secret-key"
	Region    = "us-east-1"
)

// Server is a running versitygw with a posix backend in a temporary
// directory.
type Server struct {
	t    testing.TB
	bin  string
	root string
	addr string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Binary returns the versitygw binary, or "" when there is none.
func Binary() string {
	if p := os.Getenv("SEGPIPE_VERSITYGW"); p != "" {
		return p
	}
	p, _ := exec.LookPath("versitygw")
	return p
}

// Start starts a server, with buckets made for the given names, and sets
// the AWS credential environment variables for the rest of the test (so
// the test may not be parallel).
func Start(t testing.TB, buckets ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no S3-compatible server: install versitygw (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0) or set SEGPIPE_VERSITYGW")
	}
	root := t.TempDir()
	for _, b := range buckets {
		if err := os.Mkdir(filepath.Join(root, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_REGION", Region)
	// Keep the SDK away from a developer's own profile and the metadata
	// service.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(root, "no-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(root, "no-credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s := &Server{t: t, bin: bin, root: root, addr: addr}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = &bytes.Buffer{}
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--region", Region, "--port", s.addr, "posix", s.root)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			s.t.Fatalf("versitygw did not listen on %s: %v\n%s", s.addr, err, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (as a crash would) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a stopped server again on the same address and data.
func (s *Server) Restart() { s.start() }

// Endpoint is the server's base URL.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// URL is an s3:// location for bucket/prefix on this server.
func (s *Server) URL(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.Endpoint()}, "region": {Region}, "use_path_style": {"true"}}
	u := url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: q.Encode()}
	if prefix == "" {
		u.Path = ""
	}
	return u.String()
}

// Dir is the local directory behind a bucket prefix (the posix backend
// stores objects as files), for tests that damage objects behind the
// server's back.
func (s *Server) Dir(bucket, prefix string) string {
	return filepath.Join(s.root, bucket, filepath.FromSlash(prefix))
}

// String names the server for messages.
func (s *Server) String() string { return fmt.Sprintf("versitygw at %s", s.addr) }

// Counter counts the requests that pass through a Proxy, and can make
// it stall.
type Counter struct {
	stall  atomic.Bool
	mu     sync.Mutex
	gets   int   // GET requests of objects
	ranged int   // of which with a Range header
	bytes  int64 // response body bytes of GETs
}

// Gets returns the GET requests seen, those with a Range header, and the
// body bytes they returned.
func (c *Counter) Gets() (gets, ranged int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.ranged, c.bytes
}

// Stall makes the proxy hold every ranged GET that arrives while on,
// answering nothing until the client gives up: a bucket that stopped
// responding in the middle of a read.
func (c *Counter) Stall(on bool) { c.stall.Store(on) }

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.gets, c.ranged, c.bytes = 0, 0, 0
	c.mu.Unlock()
}

type countingBody struct {
	io.ReadCloser
	c *Counter
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.c.bytes += int64(n)
	b.c.mu.Unlock()
	return n, err
}

// Proxy starts a counting reverse proxy in front of the server and returns
// an s3:// location for bucket/prefix through it. The Host header is
// passed on unchanged, so request signatures stay valid.
func (s *Server) Proxy(bucket, prefix string) (string, *Counter) {
	target, _ := url.Parse(s.Endpoint())
	c := &Counter{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method == http.MethodGet && r.Request.URL.Query().Get("list-type") == "" {
			c.mu.Lock()
			c.gets++
			if r.Request.Header.Get("Range") != "" {
				c.ranged++
			}
			c.mu.Unlock()
			r.Body = countingBody{r.Body, c}
		}
		return nil
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.stall.Load() && r.Method == http.MethodGet && r.Header.Get("Range") != "" {
			<-r.Context().Done()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	s.t.Cleanup(hs.Close)
	q := url.Values{"endpoint": {hs.URL}, "region": {Region}, "use_path_style": {"true"}}
	u := url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: q.Encode()}
	return u.String(), c
}
