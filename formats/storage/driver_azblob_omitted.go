//go:build !nocloud && segpipe_no_azblob

package storage

// The Azure Blob driver (the Azure SDK) can be left out of a build whose
// users do not read azblob:// shards.
func init() { omitDriver("azblob", "segpipe_no_azblob") }
