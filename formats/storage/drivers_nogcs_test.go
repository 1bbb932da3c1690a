//go:build !nocloud && segpipe_no_gcs

package storage

import "testing"

// TestNoGCSBuildRefusesGS: with -tags segpipe_no_gcs, gs:// is refused
// with an error that says how to get it; s3:// and local paths still work.
func TestNoGCSBuildRefusesGS(t *testing.T) { checkOmitted(t, "gs", "segpipe_no_gcs") }
