//go:build cgo

// Command native is libsegpipe.so: segpipe's loader inside the calling
// process, behind a small C ABI (segpipe.h) and the Arrow C stream
// interface, for the Python package (python/segpipe) and any other
// language with an Arrow C stream importer. Build it with
//
//	CGO_ENABLED=1 go build -buildmode=c-shared -o libsegpipe.so ./python/native
//
// (scripts/build-native.sh). It is the only cgo artifact of the project:
// every file carries the cgo build constraint, so a CGO_ENABLED=0 build of
// ./... skips it and the CLI stays pure Go.
//
// # One path with serve
//
// segpipe_open takes a `segpipe serve` ticket, parsed by
// remote.ParseLocalRequest (ParseRequest's checks, with the shards field a
// shard directory or URL), turned into a loader and a schema by remote.Plan
// as DoGet does, and its records shaped by Plan.Encode as DoGet does, so
// the stream's records are those serve sends for the request, byte for
// byte, and a bad request gets serve's message.
//
// With options "remote" (remote.go) the session reads a server's stream
// instead, through pipeline/remote's client (StreamAsSent): the records
// are the server's as they travelled, with the Go client's retries, and
// FlightBatches(transport="native") takes them as it takes pyarrow's.
//
// # Memory
//
// The cgo rules forbid C to keep a pointer to Go memory after a call
// returns, and a consumer keeps each batch until it releases it. Every
// buffer of every exported record is therefore C memory: the loader runs
// with pipeline.Config.Allocator set to a buffer pool over arrow-go's
// mallocator (buffers are allocated and freed with malloc/free), and
// Plan.Encode's windowed buffers come from the same pool. A record's
// buffers go back when the consumer calls its release callback. The pool
// outlives the session by a few seconds (pools.go), so that the next epoch
// pass reuses the buffers of the last instead of faulting in fresh pages;
// idle, it frees them. A remote session's client takes every buffer from
// the same C allocator (remote.ClientConfig.Memory): the chunks gRPC reads
// frames into, which the records alias, and the copies it cannot avoid.
//
// # Threads
//
// The library runs its loader workers on one goroutine per core and keeps
// one more P for the host's calls into Go once a local loader opens
// (procs.go): a Python thread that asks for a batch or releases one would
// otherwise wait, holding the GIL, for a worker's time slice to end. A
// remote session reads on a goroutine of its own and hands whole records to
// the calling thread (remote.go).
//
// # Handles
//
// A handle is a positive int64 key of a mutex-guarded map of open
// sessions, never a pointer, so a stale or forged handle is refused (-1,
// or ignored by segpipe_close) instead of followed. The exported stream
// does not depend on the handle: it holds its session itself, so closing
// the handle ends the stream (get_next then reports an error) without
// invalidating it, and releasing the stream stops the loader without
// freeing the handle.
//
// # Faults
//
// Every exported function, and the stream's callbacks (through the record
// reader they call), recover a panic into an error return: a fault in Go
// code never takes the host process down.
package main
