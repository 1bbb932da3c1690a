//go:build !nocloud && segpipe_no_azblob

package storage

import "testing"

// TestNoAzblobBuildRefusesAzblob: with -tags segpipe_no_azblob, azblob://
// is refused with an error that says how to get it; s3:// and local paths
// still work.
func TestNoAzblobBuildRefusesAzblob(t *testing.T) {
	checkOmitted(t, "azblob", "segpipe_no_azblob")
}
