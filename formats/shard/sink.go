package shard

import (
	"crypto/sha256"
	"errors"
	"hash"
	"io"
)

// sinkChunk is the unit handed from the Parquet encoder to the goroutine
// that hashes and writes; sinkDepth chunks may be in flight.
const (
	sinkChunk = 1 << 20
	sinkDepth = 4
)

// hashSink receives the Parquet writer's output, counts it, and hands it in
// 1 MiB chunks to a goroutine that hashes it (sha256 for the manifest) and
// writes it to the file, so hashing and write syscalls overlap encoding.
// It has no Close method on purpose: pqarrow closes sinks that have one,
// and the file must be flushed and synced before it is closed.
type hashSink struct {
	f   io.Writer
	h   hash.Hash
	n   int64
	buf []byte

	full chan []byte
	free chan []byte
	done chan error
	err  error // first error seen by the producer side

	finished bool
}

func newHashSink(f io.Writer) *hashSink {
	s := &hashSink{
		f: f, h: sha256.New(),
		full: make(chan []byte, sinkDepth),
		free: make(chan []byte, sinkDepth+1),
		done: make(chan error, 1),
	}
	for i := 0; i < sinkDepth+1; i++ {
		s.free <- make([]byte, 0, sinkChunk)
	}
	s.buf = <-s.free
	go s.drain(s.full)
	return s
}

// drain owns the file and the hash until it reports on done. It gets the
// channel as an argument because the producer may finish before drain is
// scheduled.
func (s *hashSink) drain(full <-chan []byte) {
	var err error
	for b := range full {
		if err == nil {
			s.h.Write(b)
			_, err = s.f.Write(b)
		}
		s.free <- b[:0]
	}
	s.done <- err
}

func (s *hashSink) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
		if len(s.buf) == cap(s.buf) {
			s.full <- s.buf
			s.buf = <-s.free
		}
	}
	s.n += int64(n)
	return n, nil
}

// finish writes what is buffered, waits for the writer goroutine and
// returns the first write error. The sink is unusable afterwards.
func (s *hashSink) finish() error {
	if s.finished {
		return errors.New("shard sink finished twice")
	}
	s.finished = true
	if len(s.buf) > 0 {
		s.full <- s.buf
	}
	close(s.full)
	err := <-s.done
	if err != nil {
		s.err = err
	}
	return err
}

// sum is the sha256 of everything written; valid after finish.
func (s *hashSink) sum() []byte { return s.h.Sum(nil) }

var _ io.Writer = (*hashSink)(nil)
