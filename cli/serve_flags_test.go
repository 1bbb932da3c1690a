package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeKeyPair writes a self-signed certificate and its key as PEM files.
func writeKeyPair(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// Issue 35: serve with TLS files that do not exist exited 1, as a failure.
// Files named on the command line that are missing, directories or not a
// key pair are usage errors (exit 2) that name the flag; so is a negative
// --stall-timeout.
func TestServeRefusesBadTLSFilesAsUsage(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing cert", []string{"--tls-cert", missing, "--tls-key", key}, `--tls-cert "` + missing + `" does not exist`},
		{"missing key", []string{"--tls-cert", cert, "--tls-key", missing}, `--tls-key "` + missing + `" does not exist`},
		{"directory", []string{"--tls-cert", dir, "--tls-key", key}, "is a directory"},
		{"not PEM", []string{"--tls-cert", junk, "--tls-key", key}, "not a usable key pair"},
		{"swapped", []string{"--tls-cert", key, "--tls-key", cert}, "not a usable key pair"},
		{"negative stall timeout", []string{"--stall-timeout", "-1s"}, "--stall-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, append([]string{"serve", "--shards", dir, "--addr", "127.0.0.1:0"}, tc.args...)...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, want %d saying %q\n%s%s", code, ExitUsage, tc.want, out, errs)
			}
		})
	}
	if cfg, err := loadTLS(cert, key); err != nil || len(cfg.Certificates) != 1 {
		t.Errorf("a valid key pair: %v", err)
	}
}
