//go:build !nocloud

package storage

import _ "gocloud.dev/blob/s3blob" // s3://

func init() { registerDriver("s3") }
