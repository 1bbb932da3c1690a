//go:build !nocloud && segpipe_no_gcs

package storage

// The GCS driver is about 23 MB of the shared library (cloud.google.com/go
// and its gRPC and auth stacks); a build for users who read local or S3
// shards can leave it out.
func init() { omitDriver("gs", "segpipe_no_gcs") }
