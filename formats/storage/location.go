package storage

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
)

// Location is a parsed shard location: a local directory or a prefix in a
// bucket.
type Location struct {
	// Scheme is "" for a local directory, else "s3", "gs" or "azblob".
	Scheme string
	// Dir is the local directory (Scheme "").
	Dir string
	// Bucket is the bucket (or Azure container) name.
	Bucket string
	// Prefix is the key prefix of the objects: "" or ending in "/".
	Prefix string
	// Query holds the URL's query parameters, handed to the cloud's
	// driver unchanged (endpoint, region, use_path_style, ...).
	Query url.Values
}

// bucketSchemes are the object stores this package parses; each is opened
// through its gocloud.dev/blob driver, linked in by a blank import in
// driver_SCHEME.go unless the build leaves it out (see Drivers).
var bucketSchemes = map[string]bool{"s3": true, "gs": true, "azblob": true}

// ParseLocation parses a plain path, a file:// URL or a bucket URL
// (s3://bucket/prefix?endpoint=...&region=...&use_path_style=true, gs://,
// azblob://). It refuses credentials in the URL: each cloud's SDK finds
// them itself (environment, profile, instance role).
func ParseLocation(s string) (Location, error) {
	if s == "" {
		return Location{}, fmt.Errorf("empty shard location")
	}
	if strings.ContainsRune(s, 0) {
		return Location{}, fmt.Errorf("shard location %q: contains a NUL byte", s)
	}
	scheme, _, isURL := strings.Cut(s, "://")
	if !isURL || !validScheme(scheme) {
		return Location{Dir: filepath.Clean(s)}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return Location{}, fmt.Errorf("shard location %q: %w", s, err)
	}
	scheme = strings.ToLower(u.Scheme)
	if u.User != nil {
		return Location{}, fmt.Errorf("shard location %q: credentials do not belong in a URL; the cloud SDK reads them from the environment, a profile or the instance role", redact(u))
	}
	if u.Fragment != "" || strings.HasSuffix(s, "#") {
		return Location{}, fmt.Errorf("shard location %q: a fragment (#...) has no meaning here", s)
	}
	switch {
	case scheme == "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("shard location %q: a file URL takes an absolute path (file:///data/shards), not host %q", s, u.Host)
		}
		if u.RawQuery != "" {
			return Location{}, fmt.Errorf("shard location %q: a file URL takes no query parameters", s)
		}
		if u.Path == "" {
			return Location{}, fmt.Errorf("shard location %q: no path", s)
		}
		return Location{Dir: filepath.Clean(filepath.FromSlash(u.Path))}, nil
	case bucketSchemes[scheme]:
		if u.Host == "" {
			return Location{}, fmt.Errorf("shard location %q: no bucket name (want %s://BUCKET/PREFIX)", s, scheme)
		}
		if u.Opaque != "" {
			return Location{}, fmt.Errorf("shard location %q: want %s://BUCKET/PREFIX", s, scheme)
		}
		q := u.Query()
		if _, ok := q["prefix"]; ok {
			return Location{}, fmt.Errorf("shard location %q: give the prefix as the URL's path, not as ?prefix=", s)
		}
		prefix, err := cleanPrefix(u.Path)
		if err != nil {
			return Location{}, fmt.Errorf("shard location %q: %w", s, err)
		}
		return Location{Scheme: scheme, Bucket: u.Host, Prefix: prefix, Query: q}, nil
	default:
		return Location{}, fmt.Errorf("shard location %q: scheme %q is not supported (use a path, file://, s3://, gs:// or azblob://)", s, scheme)
	}
}

// validScheme reports whether s looks like a URL scheme (RFC 3986), so that
// "a://b" is a URL while "./x://y" stays a path.
func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// cleanPrefix turns a URL path into a key prefix: no leading slash, a
// trailing one, and no empty, "." or ".." segment (keys are not paths, and
// a store would take "a/../b" literally).
func cleanPrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("prefix %q: empty, \".\" or \"..\" segment", p)
		}
	}
	return p + "/", nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = url.User("REDACTED")
	return c.String()
}

// IsBucket reports whether l names a bucket rather than a local directory.
func (l Location) IsBucket() bool { return l.Scheme != "" }

// bucketURL is the URL gocloud.dev/blob opens: the bucket and the query
// parameters, without the prefix (applied with blob.PrefixedBucket).
func (l Location) bucketURL() string {
	u := url.URL{Scheme: l.Scheme, Host: l.Bucket, RawQuery: l.Query.Encode()}
	return u.String()
}

// String renders the location; parsing it gives l back.
func (l Location) String() string {
	if !l.IsBucket() {
		return l.Dir
	}
	u := url.URL{Scheme: l.Scheme, Host: l.Bucket, Path: "/" + strings.TrimSuffix(l.Prefix, "/"), RawQuery: l.Query.Encode()}
	if l.Prefix == "" {
		u.Path = ""
	}
	return u.String()
}

// Join names the object or file name inside l, for messages.
func (l Location) Join(name string) string {
	if !l.IsBucket() {
		return filepath.Join(l.Dir, name)
	}
	u := url.URL{Scheme: l.Scheme, Host: l.Bucket, Path: "/" + path.Join(l.Prefix, name)}
	return u.String()
}

// Below returns the location of rel, a slash-separated relative path
// below l (a shard set below a server's shard root).
func (l Location) Below(rel string) (Location, error) {
	p, err := cleanPrefix(rel)
	if err != nil || strings.HasPrefix(rel, "/") {
		return Location{}, fmt.Errorf("%q: want a relative path without empty, \".\" or \"..\" segments", rel)
	}
	if l.IsBucket() {
		l.Prefix += p
	} else {
		l.Dir = filepath.Join(l.Dir, filepath.FromSlash(p))
	}
	return l, nil
}
