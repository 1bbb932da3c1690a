package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// RequestVersion is the ticket format this package writes and accepts.
const RequestVersion = 1

// Mask transports.
const (
	MasksDense    = "dense"    // the batch schema as is: (sum_N, Hp, Wp) bytes
	MasksWindowed = "windowed" // per instance its window on the grid and w·h bytes
)

// Body compressions of a stream: Arrow IPC buffer compression, which every
// Arrow reader (arrow-go's ipc.Reader, pyarrow) undoes on read, so the
// records a client gets are byte for byte those of an uncompressed stream.
const (
	CompressionNone = ""     // buffers as they are (default)
	CompressionLZ4  = "lz4"  // LZ4 frame: cheap, a modest ratio
	CompressionZstd = "zstd" // Zstandard: a better ratio for more CPU
)

// ErrBadRequest marks a ticket or descriptor the server cannot use: bad
// JSON, an unknown field, a wrong version or an invalid setting.
var ErrBadRequest = errors.New("remote: bad request")

// ErrOverBudget marks a request whose own memory estimate exceeds the
// server's whole budget: well formed, but no wait makes it fit, so it is
// answered FailedPrecondition, which clients do not retry (a server busy
// now answers ResourceExhausted, which they do).
var ErrOverBudget = errors.New("segpipe serve: the request's memory estimate is over the server's whole memory budget (--max-memory); lower batch_size or imgsz")

// A client's value is quoted in an error or a log line by at most its first
// maxQuote bytes, and a message that may hold client input (the JSON
// decoder's, an Open function's) is cut at maxErrorMessage bytes, so that a
// request of any size never comes back, or into the server's log, at its
// own size.
const (
	maxQuote        = 64
	maxErrorMessage = 1024
)

// quote is %q of s, or of its first maxQuote bytes followed by its length.
func quote(s string) string {
	if len(s) <= maxQuote {
		return strconv.Quote(s)
	}
	return strconv.Quote(prefix(s, maxQuote)) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clip is s, or its first n bytes followed by its length.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n) + fmt.Sprintf("… (%d bytes)", len(s))
}

// decodeError is the JSON decoder's message, the field named before the
// value, which is clipped: the decoder quotes a value at its own size.
func decodeError(err error) string {
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && e.Field != "" {
		return fmt.Sprintf("field %s: cannot take %s, want %s", e.Field, clip(e.Value, maxQuote), e.Type)
	}
	return clip(err.Error(), 2*maxQuote)
}

// prefix is s cut to at most n bytes, not inside a UTF-8 sequence.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Request is the loader request a ticket carries, as JSON. Fields left out
// take the loader's defaults; unknown fields are an error, so a client never
// believes a setting was applied when the server does not know it.
type Request struct {
	Version int `json:"version"`
	// Shards names the shard set: a directory relative to the server's
	// shard root ("" or "." for the root itself), at most MaxShardsLen
	// bytes; the server cleans it ("./val/" names "val").
	Shards string `json:"shards"`
	// Start is the resume state (seed, epoch, consumed); a fresh run has
	// consumed 0.
	Start order.State `json:"start"`
	// Epochs is the schedule's epoch count (default start.epoch+1).
	Epochs      int  `json:"epochs,omitempty"`
	CloseMosaic int  `json:"close_mosaic,omitempty"`
	Rank        int  `json:"rank,omitempty"`
	WorldSize   int  `json:"world_size,omitempty"`
	BatchSize   int  `json:"batch_size,omitempty"`
	ImgSz       int  `json:"imgsz,omitempty"`
	Val         bool `json:"val,omitempty"`
	// Augment is the augmentation settings; nil keeps
	// augment.DefaultConfig. A ticket's object overrides only the settings
	// it names (augment.Config.UnmarshalJSON); the canvas side is ImgSz
	// above, so Augment.ImgSz is ignored.
	Augment *augment.Config `json:"augment,omitempty"`
	// Masks is MasksDense (default) or MasksWindowed.
	Masks string `json:"masks,omitempty"`
	// Limit stops the stream after this many batches (0: no limit).
	Limit int64 `json:"limit,omitempty"`
	// Compression is the body compression of the stream's records:
	// CompressionNone (default), CompressionLZ4 or CompressionZstd. It
	// trades server and client CPU for bytes on the wire; a loader in
	// this process (ParseLocalRequest) has no wire and ignores it.
	Compression string `json:"compression,omitempty"`
	// Classes keeps only the instances of these classes (Ultralytics'
	// classes; pipeline.Config.Classes); empty keeps every class.
	Classes []int32 `json:"classes,omitempty"`
	// SingleClass gives every instance class 0 (Ultralytics' single_cls;
	// pipeline.Config.SingleClass).
	SingleClass bool `json:"single_cls,omitempty"`
	// Fraction in (0, 1) streams only the set's first rows in manifest
	// order (Ultralytics' fraction; pipeline.Config.Fraction); 0 or 1:
	// every row.
	Fraction float64 `json:"fraction,omitempty"`
	// Rect streams rectangular validation batches (Ultralytics' rect;
	// pipeline.Config.Rect); Val only. The records then end with the
	// batch.ColCanvas column.
	Rect bool `json:"rect,omitempty"`
	// MultiScale m in (0, 1) draws each training batch's side on the
	// 32 px grid (Ultralytics' multi_scale; pipeline.Config.MultiScale);
	// the records then end with the batch.ColCanvas column.
	MultiScale float64 `json:"multi_scale,omitempty"`
}

// ParseRequest decodes and checks a ticket. Errors wrap ErrBadRequest and
// name the offending field.
func ParseRequest(b []byte) (Request, error) { return parseRequest(b, checkSet) }

// ParseLocalRequest is ParseRequest for a loader in this process (the
// shared library of python/native): Shards is a shard location, a path or
// a bucket URL opened as is (as `segpipe bench --shards` opens it) rather
// than a set name below a server's root, and must not be empty. Every other
// field is decoded and checked by ParseRequest's code.
func ParseLocalRequest(b []byte) (Request, error) {
	return parseRequest(b, func(shards string) error {
		if shards == "" {
			return fmt.Errorf("%w: shards: want a shard directory or URL", ErrBadRequest)
		}
		return nil
	})
}

// parseRequest decodes a request and checks it, its shard field with
// checkShards.
func parseRequest(b []byte, checkShards func(string) error) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, fmt.Errorf("%w: ticket is not a version %d loader request: %s", ErrBadRequest, RequestVersion, decodeError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, fmt.Errorf("%w: trailing data after the request object", ErrBadRequest)
	}
	if err := r.validate(checkShards); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Marshal returns the request as ticket bytes (version set when zero).
func (r Request) Marshal() []byte {
	if r.Version == 0 {
		r.Version = RequestVersion
	}
	b, _ := json.Marshal(r) // plain data: cannot fail
	return b
}

// Validate checks what can be checked without the data: version, shard
// set name, mask transport and the loader settings.
func (r Request) Validate() error { return r.validate(checkSet) }

// checkSet checks a shard set name below a server's root.
func checkSet(name string) error {
	_, err := cleanSet(name)
	return err
}

func (r Request) validate(checkShards func(string) error) error {
	if r.Version != RequestVersion {
		return fmt.Errorf("%w: version %d, this server speaks version %d", ErrBadRequest, r.Version, RequestVersion)
	}
	if err := checkShards(r.Shards); err != nil {
		return err
	}
	switch r.Masks {
	case "", MasksDense, MasksWindowed:
	default:
		return fmt.Errorf("%w: masks %s: want %q or %q", ErrBadRequest, quote(r.Masks), MasksDense, MasksWindowed)
	}
	switch r.Compression {
	case CompressionNone, CompressionLZ4, CompressionZstd:
	default:
		return fmt.Errorf("%w: compression %s: want %q, %q or %q (uncompressed)", ErrBadRequest, quote(r.Compression), CompressionLZ4, CompressionZstd, CompressionNone)
	}
	if r.Limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrBadRequest, r.Limit)
	}
	// Memory is the server's to judge, against its own budget (DoGet).
	if _, err := r.Config(pipeline.Config{MaxMemory: -1}); err != nil {
		return err
	}
	return nil
}

// NewRequest returns the request that has a server's loader run with cfg
// over the shard set shards: the inverse of Request.Config for every
// setting a request carries. The server decides resources (workers,
// prefetch, cache, shuffle window) and the mask stride, so a Stride other
// than the default is an error rather than a silent change.
func NewRequest(shards string, cfg pipeline.Config) (Request, error) {
	if cfg.Stride != 0 && cfg.Stride != 4 {
		return Request{}, fmt.Errorf("%w: mask stride %d: a server streams stride 4", ErrBadRequest, cfg.Stride)
	}
	a := cfg.Augment
	if a.ImgSz == 0 {
		a = augment.DefaultConfig()
	}
	r := Request{Version: RequestVersion, Shards: shards, Start: cfg.Start, Epochs: cfg.Epochs,
		CloseMosaic: cfg.CloseMosaic, Rank: cfg.Rank, WorldSize: cfg.WorldSize, BatchSize: cfg.BatchSize,
		Val: cfg.Val, ImgSz: a.ImgSz, Augment: &a, Classes: cfg.Classes, SingleClass: cfg.SingleClass,
		Fraction: cfg.Fraction, Rect: cfg.Rect, MultiScale: cfg.MultiScale}
	return r, r.Validate()
}

// DatasetInfo describes a shard set. GetFlightInfo returns it as JSON app
// metadata, so that a trainer sizes its schedule and names its classes
// without holding the data.
type DatasetInfo struct {
	// Images is the number of rows (images) in the set: one epoch of all
	// ranks together.
	Images int `json:"images"`
	// Categories is the set's category table (empty for sources without
	// a manifest).
	Categories []shard.Category `json:"categories,omitempty"`
}

// datasetInfo reads what DatasetInfo reports from an open source.
func datasetInfo(src pipeline.Source) DatasetInfo {
	var d DatasetInfo
	for _, r := range src.BlockRows() {
		d.Images += r
	}
	if m, ok := src.(interface{ Manifest() *shard.Manifest }); ok && m.Manifest() != nil {
		d.Categories = m.Manifest().Categories
	}
	return d
}

// MaxShardsLen is the longest shard set name a server accepts, in bytes: a
// few path components below the shard root, with room to spare (Linux
// limits one component to 255 bytes). A longer name is refused rather than
// carried into tickets, logs and FlightInfo answers.
const MaxShardsLen = 1024

// cleanSet checks a shard set name and returns the clean relative path it
// names ("." for the root itself, named "" or "."), the one spelling the
// server echoes in its FlightInfo tickets and names the set by in logs and
// metrics. A name over MaxShardsLen is refused before it is cleaned, so
// that "val/././…" is never carried at its own size.
func cleanSet(name string) (string, error) {
	if len(name) > MaxShardsLen {
		return "", fmt.Errorf("%w: shards %s: over the limit of %d bytes", ErrBadRequest, quote(name), MaxShardsLen)
	}
	if strings.ContainsRune(name, '\\') || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: shards %s: want a path relative to the shard root, with forward slashes", ErrBadRequest, quote(name))
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: shards %s leaves the shard root", ErrBadRequest, quote(name))
		}
	}
	c := path.Clean("/" + name)[1:]
	if c == "" {
		c = "."
	}
	return c, nil
}

// transport returns the mask transport with its default applied.
func (r Request) transport() string {
	if r.Masks == "" {
		return MasksDense
	}
	return r.Masks
}

// compression returns the compression with its default named, for logs and
// metric labels.
func (r Request) compression() string {
	if r.Compression == CompressionNone {
		return "none"
	}
	return r.Compression
}

// writerOptions are the IPC writer options of the request's compression.
// The writer compresses each body buffer whole, one after the other, on the
// stream's goroutine: streams run side by side, so a server's cores are
// kept busy by its streams, not by one stream's buffers.
func (r Request) writerOptions() []ipc.Option {
	switch r.Compression {
	case CompressionLZ4:
		return []ipc.Option{ipc.WithLZ4()}
	case CompressionZstd:
		return []ipc.Option{ipc.WithZstd()}
	}
	return nil
}

// Config turns the request into a loader configuration. Resource settings
// (workers, prefetch, cache, logger) come from base: the server decides
// those, not the client.
func (r Request) Config(base pipeline.Config) (pipeline.Config, error) {
	c := base
	c.BatchSize, c.Start, c.Epochs, c.CloseMosaic = r.BatchSize, r.Start, r.Epochs, r.CloseMosaic
	c.Rank, c.WorldSize, c.Val = r.Rank, r.WorldSize, r.Val
	c.Classes, c.SingleClass, c.Fraction = r.Classes, r.SingleClass, r.Fraction
	c.Rect, c.MultiScale = r.Rect, r.MultiScale
	a := augment.DefaultConfig()
	if r.Augment != nil {
		a = *r.Augment
	}
	a.ImgSz = augment.DefaultImgSz
	if r.ImgSz != 0 {
		a.ImgSz = r.ImgSz
	}
	c.Augment = a
	if r.BatchSize < 0 || r.Epochs < 0 || r.CloseMosaic < 0 || r.ImgSz < 0 || r.WorldSize < 0 {
		return c, fmt.Errorf("%w: negative batch_size, epochs, close_mosaic, imgsz or world_size", ErrBadRequest)
	}
	// The loader's own validation, so that a bad request fails when the
	// ticket is read, before any data is opened.
	if err := c.Validate(); err != nil {
		if errors.Is(err, pipeline.ErrMemoryLimit) {
			return c, fmt.Errorf("%w: %w", ErrOverBudget, err)
		}
		return c, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return c, nil
}
