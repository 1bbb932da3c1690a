// Package storage is segpipe's one way to reach shard bytes, wherever they
// live: a local directory (a plain path or file:///path) or a prefix in a
// bucket (s3://, gs://, azblob://) through gocloud.dev/blob. The shard
// reader and writer, and every command that takes a shard directory, go
// through a [Dir], so nothing above this package knows where bytes come
// from.
//
// # Reading
//
// A [File] is an io.ReaderAt over one object. Nothing is downloaded whole:
// opening a file reads its tail (the Parquet footer) in one ranged request;
// once the caller names the byte ranges it reads whole ([File.SetBlocks]:
// the shard reader passes its row groups), a read inside a range fetches
// the whole range in one request and the next ranges are fetched in the
// background, within [Options.ReadAheadBytes], so that decoding never waits
// on the network. A loader that knows its order ahead asks for those ranges
// with [Dir.Prefetch]. Transient errors (timeouts, 5xx, refused or dropped
// connections, short bodies) are retried with exponential backoff; the
// final error names the object, the byte range and the number of attempts.
// Not-found and permission errors are not retried.
//
// With [Options.CacheDir] set, every range fetched from a bucket is kept in
// that local directory, keyed by the object's location, size and ETag (a
// replaced object never serves stale bytes), up to [Options.CacheBytes];
// the least recently used entries go first. Entries are written atomically
// (internal/atomicfile) and read by name, so several processes can share a
// cache directory and it survives restarts. Local directories are never
// cached: they are read directly.
//
// # Writing
//
// [Dir.Create] returns a [Writer] whose content becomes visible only on a
// successful [Writer.Commit]: locally through internal/atomicfile (temporary
// file, fsync, rename, directory fsync); in a bucket the object appears
// when its upload completes, and Commit then checks the stored object's
// size and sha256 (read back) against what was written, deleting it on a
// mismatch. An aborted or killed upload leaves no object (an unfinished
// S3 multipart upload is invisible to readers; a bucket lifecycle rule
// that aborts incomplete multipart uploads reclaims its space).
//
// # Credentials and options
//
// Credentials come from each cloud SDK's usual chain (environment
// variables, shared profile, instance or workload identity), never from the
// URL: a URL with user information is refused. Query parameters go to the
// driver unchanged: for S3-compatible stores
// s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true.
//
// # Builds without the cloud drivers
//
// The three cloud SDKs are most of a default segpipe binary's size. Each
// driver is linked by a blank import in its own file (driver_s3.go,
// driver_gs.go, driver_azblob.go), which registers its scheme from init,
// the way gocloud.dev's own blank imports register URL openers. The build
// tag nocloud leaves all three files out (scripts/build-small.sh builds
// with -tags nocloud,nocuda): local paths and file:// URLs work as before,
// bucket URLs still parse, and [Open] refuses them with an error wrapping
// [ErrNoDriver] that names the scheme and the build that has its driver.
// [Drivers] lists the schemes a binary can open.
package storage
