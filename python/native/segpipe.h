/*
 * segpipe.h: the C ABI of libsegpipe.so, segpipe's loader inside the
 * calling process (go build -buildmode=c-shared ./python/native; see
 * scripts/build-native.sh). The batches come out as an Arrow C stream
 * (https://arrow.apache.org/docs/format/CStreamInterface.html) whose
 * records are, byte for byte, those `segpipe serve` sends for the same
 * request; their buffers are C memory that stays valid until the
 * consumer calls each record's release callback, whatever happens to the
 * handle.
 *
 * Fork: the library's Go runtime lives in the process that loaded it. A
 * child made by fork must call none of these functions (they would wait
 * forever for the runtime's threads, which a fork does not copy); the
 * stream's and the batches' callbacks check the process and, in a child,
 * return at once: a release there leaks what it would free (the child's
 * exit frees it), get_next and get_schema return ECHILD.
 *
 * Threads: every function may be called from any thread. A stream is
 * read from one thread at a time (the Arrow C stream rule); segpipe_state
 * reports the batch the stream's get_next handed out last.
 *
 * Errors: no function crashes the host process on bad input or an
 * internal fault; each returns an error value, and a message where it
 * takes an error buffer. A message is NUL-terminated and cut to fit
 * errcap bytes (nothing is written when errcap is 0).
 */
#ifndef SEGPIPE_H
#define SEGPIPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The Arrow C data and stream interfaces, as the Arrow specification
 * defines them (the guards let a program include Arrow's own copy too). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
  int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
  const char *(*get_last_error)(struct ArrowArrayStream *);
  void (*release)(struct ArrowArrayStream *);
  void *private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifndef SEGPIPE_NO_PROTOTYPES

/*
 * segpipe_open starts a loader and exports its batch stream into *out,
 * which must be zero-initialised (or released) memory of the caller.
 *
 * request_json is a `segpipe serve` ticket: the same fields, checked by the
 * same code (version, shards, start {seed, epoch, consumed}, epochs,
 * close_mosaic, rank, world_size, batch_size, imgsz, val, augment {...},
 * masks "dense"|"windowed", limit), except that shards is a shard
 * directory or bucket URL, opened as `segpipe bench --shards` opens it.
 *
 * options_json (NULL or "{}" for the defaults) holds the resources the
 * server would decide: {"workers": N (default the CPU count), "prefetch":
 * N, "cache_bytes": N (decoded-image cache, default 512 MiB; one per shard
 * set and cache_bytes, shared by every open of that set by any path to it,
 * so that the epochs a caller opens one by one reuse its decoded images as
 * one loader's epochs do; freed ten seconds after the last open of it is
 * closed),
 * "max_memory": N (bytes the loader's estimate may reach: 0 or absent for
 * the default, half the machine's or container's memory, as the CLI; -1:
 * no limit; any other negative value is refused),
 * "strict": bool (fail on the first damaged sample instead of skipping and
 * counting it)}. Unknown keys are refused.
 *
 * With "remote": {"addr": "host:port", ...} instead, the stream reads the
 * batches of a `segpipe serve`: request_json is then exactly the ticket
 * (shards a set name below the server's root), the records are the
 * server's as they travelled (windowed masks stay windowed) and nothing
 * is copied after gRPC's one copy into the receive buffers, which are C
 * memory of this library's like every other buffer. Its keys: "token"
 * (bearer token), "tls": bool, "tls_roots": PEM roots (default the
 * system's), "retries" (reconnects in a row from the last state, default
 * 5, 0 for none), "backoff" and "max_backoff" (seconds; 0 or absent: 0.1
 * and 5), "timeout" (seconds: no batch, or no connection, within it fails
 * the read; 0 or absent: wait). A server not reachable yet is retried as
 * a dropped connection is: reopened from the state after the last batch,
 * with backoff; a busy server (admission refused) is waited for. The
 * library reads one batch ahead. Passes to one server with the same keys
 * share a connection and its receive memory, freed ten seconds after the
 * last is closed. The local keys above are refused beside it;
 * segpipe_summary reports {"batches": B} only (the server counts skips).
 *
 * The stream's schema is the batch schema of formats/batch (dense masks)
 * or its windowed form (masks "windowed"); get_next returns the next batch
 * and, after the last (the schedule's end or the request's limit), a
 * released array. get_last_error describes a failure of the loader (strict
 * mode on damaged data, a shard that cannot be read). Releasing the stream
 * stops the loader; the handle stays valid for segpipe_state and
 * segpipe_summary until segpipe_close.
 *
 * Returns a handle > 0, or 0 with the reason in errbuf: a bad request gets
 * the message `segpipe serve` gives, a loader over max_memory the
 * estimate's figures.
 */
int64_t segpipe_open(const char *request_json, const char *options_json,
                     struct ArrowArrayStream *out, char *errbuf, size_t errcap);

/*
 * segpipe_state writes the resume state as JSON {"seed":S,"epoch":E,
 * "consumed":C} into buf: the state after the last batch get_next handed
 * out (the request's start before the first). A request with start set to
 * it continues with exactly the next batch. Returns the JSON's length
 * (without the NUL; the text is cut to fit cap, as a message is), or -1 for
 * a handle that is not open, writing nothing.
 */
int segpipe_state(int64_t h, char *buf, size_t cap);

/*
 * segpipe_summary writes JSON {"images":N,"skipped":{reason:count,...},
 * "samples_skipped":N,"quarters_filled":N,"batches":B} into buf: the
 * loader's skip summary (damaged shard data and undecodable images,
 * skipped and counted, as `segpipe bench` prints it) and the batches
 * handed out. Returns the length as segpipe_state, or -1 for a handle that
 * is not open.
 */
int segpipe_summary(int64_t h, char *buf, size_t cap);

/*
 * segpipe_close stops the loader if it runs and frees the handle.
 * Idempotent; a stream still held then ends with an error. Batches already
 * handed out stay valid until their release callbacks run.
 */
void segpipe_close(int64_t h);

/* segpipe_version is the segpipe version, a static string. */
const char *segpipe_version(void);

/*
 * segpipe_cli runs the segpipe command line with argv (argv[0] the program
 * name, as for main) on the calling thread and returns its exit code: 0
 * success, 1 failure, 2 usage error. The command reads and writes file
 * descriptors 0, 1 and 2. It is the Python package's `segpipe` console
 * script; call it once, as a program calls main.
 */
int segpipe_cli(int argc, char **argv);

#endif /* SEGPIPE_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif

#endif /* SEGPIPE_H */
