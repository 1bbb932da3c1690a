//go:build !nocloud && !segpipe_no_gcs

package storage

import _ "gocloud.dev/blob/gcsblob" // gs://

func init() { registerDriver("gs") }
