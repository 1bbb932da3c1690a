// Package remote serves training batches over Arrow Flight and consumes
// them: CPU machines run the loader, GPU machines train.
//
// # Protocol
//
// A client asks for a stream with DoGet and a ticket holding a [Request]
// as JSON: {"version":1, "shards":"coco/train", "start":{"seed":0,
// "epoch":0,"consumed":0}, "rank":0, "world_size":8, "batch_size":32,
// "imgsz":640, "augment":{"mosaic":1.0}, "masks":"windowed"}. Unknown
// fields, a different version or invalid settings are refused with
// InvalidArgument naming the problem. The server runs one loader per
// stream (workers, prefetch and cache are the server's settings; see
// Admission) and sends
// the batches in order as Arrow IPC record batches of the formats/batch
// schema; each batch carries as Flight app metadata the resume state after
// it, {"seed","epoch","consumed","batch"}. GetFlightInfo takes a descriptor
// whose command is a request and answers its schema and one endpoint,
// located, when the server knows its peers (ServerConfig.Peers, or
// PeerSource such as DNSPeers), at every peer: Peers[rank % len(Peers)]
// first, then the others in failover order.
//
// Any Flight client can read a stream (pyarrow.flight.FlightClient.do_get);
// the data path is plain protobuf on the wire. The IPC metadata of a batch
// message may end in up to 15 zero bytes of padding (readers parse its
// flatbuffer and ignore them): they place the body 8-byte aligned within the
// gRPC message, which lets this package's client use it in place.
//
// # Masks on the wire
//
// With "masks":"dense" the schema is the batch schema. With "windowed" the
// masks column is replaced by mask_windows (per instance its tight window
// x0,y0,w,h on the grid) and mask_data (per image the windows' w·h bytes),
// see ColMaskWindows; [Stream] expands them back into the dense
// (sum_N, Hp, Wp) stack, so a consumer of Stream sees batch records either
// way, byte-identical to the local loader's. A stream from
// [Client.OpenWindowed] delivers them windowed instead, checked
// as the expansion checks them, for a consumer that expands them on a
// device (segpipe train --device cuda: trainer/train stages the windows
// and their bytes and expands them there).
//
// # Client
//
// [Client.Stream] returns a [Stream], which implements pipeline.Batches.
// When the connection drops it reopens the stream from the state of the
// last batch it delivered (the loader is deterministic from that state, so
// the batches that follow are the ones the broken stream would have sent),
// retrying with exponential backoff and failing with an error that names
// the cause after ClientConfig.Retries attempts in a row.
//
// A Client whose Addr is a comma-separated list, or one host name that
// resolves to several addresses (a Kubernetes headless Service), talks to
// a fleet: rank r streams from server r mod n, and a stream whose server
// goes away continues on the next server from the last delivered state,
// with the same batches bit for bit (see fleet.go).
//
// # Memory and back-pressure
//
// A stream takes the next batch from its loader only after the previous one
// has been handed to gRPC, and gRPC blocks a stream whose client does not
// read (HTTP/2 flow control). A slow client therefore holds at most the
// loader's prefetch plus one or two batches in the transport
// (Server.TransportBatches); the rest waits in the flow-control window and
// the kernel. Batch bodies are not marshalled on the server: the FlightData
// message references the record's buffers and the record is released once
// gRPC has written them. The client does not copy bodies out of gRPC's
// receive buffers either: gRPC reads the HTTP/2 frames into consecutive
// pieces of a large buffer (up to four times the largest batch message,
// between 32 MiB and 1 GiB; one spare kept), and a batch record aliases its
// body there, so a batch the caller holds keeps its piece of that buffer
// alive until it is released. When a client disconnects, gRPC cancels the
// stream's context: the loader stops, its goroutines exit and its buffers
// are freed before DoGet returns.
//
// # Admission, health
//
// Before a stream's loader exists the server estimates its memory from the
// request and the shard set (pipeline.Config.MemoryOf: the batches in
// flight and their buffers, the decoding workers' images, the shuffle
// window of rows read ahead, capped at the set's rows), plus the stream's
// send buffer (one more batch, the windowed copy on the wire). A shard
// set's decoded-image cache, which all its streams share, counts once
// while any of them runs. The process's own baseline and the collector's
// headroom are part of the budget's arithmetic (pipeline.Budget), as for
// a loader in a training process. A request that does not fit beside the
// running streams in
// ServerConfig.MaxMemory, or beyond ServerConfig.MaxStreams, is refused
// with ResourceExhausted and a message with the figures; [Client] retries
// it with backoff like a dropped stream. A request whose own estimate is
// over the whole budget can never fit: it is refused with
// FailedPrecondition (ErrOverBudget), which [Client] does not retry, nor
// fail over to another server of a fleet. When the last stream ends the
// set's cache is dropped and the freed memory is returned to the OS.
//
// A stream whose client takes no data for ServerConfig.StallTimeout
// (DefaultStallTimeout, 2 minutes: a batch is ready and the client's
// flow-control window stays full all that time) is ended: its loader,
// memory reservation and stream slot are freed, it is counted in
// segpipe_serve_stalled_streams_total, and the client receives Unavailable
// ("no progress for …") after the batches already in its window. [Client]
// and the Python FlightBatches treat that as a dropped stream and resume
// from the last batch delivered, so a trainer that pauses longer than the
// timeout pays a reconnect, while clients that stop reading can no longer
// hold every slot. gRPC drops the message it had queued for such a stream
// only when the client reads it or the connection closes.
//
// A shard set with no rows is refused (FailedPrecondition, wrapping
// pipeline.ErrEmptySet) by GetFlightInfo and DoGet rather than streamed as
// an empty epoch. A set is named by a clean relative path of at most
// MaxShardsLen bytes; FlightInfo echoes the normalised request, never the
// client's bytes.
//
// [Server.HealthHandler] serves two probes (segpipe serve mounts them on
// --metrics-addr beside /metrics): GET /healthz answers 200 "ok" while the
// process serves; GET /readyz answers 200 when a stream like the last
// admitted one (a default request before the first) would be admitted,
// and 503 "not ready: <reason>" when the stream limit or the memory budget
// is reached, so that a load balancer sends new trainers elsewhere.
//
// # Security
//
// With a token every call needs exactly one "authorization: Bearer
// <token>" header (compared in constant time; a call with several is
// refused); with TLS the server presents ServerConfig.TLS. [Listen]
// refuses non-loopback addresses when no token is set unless allowed
// explicitly.
package remote
