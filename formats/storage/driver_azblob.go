//go:build !nocloud

package storage

import _ "gocloud.dev/blob/azureblob" // azblob://

func init() { registerDriver("azblob") }
