//go:build !nocloud

package storage

import _ "gocloud.dev/blob/gcsblob" // gs://

func init() { registerDriver("gs") }
