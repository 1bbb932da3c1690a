//go:build !nocloud && !segpipe_no_azblob

package storage

import _ "gocloud.dev/blob/azureblob" // azblob://

func init() { registerDriver("azblob") }
