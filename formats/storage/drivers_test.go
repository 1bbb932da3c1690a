//go:build !nocloud && !segpipe_no_gcs && !segpipe_no_azblob

package storage

import (
	"slices"
	"testing"
)

// TestDefaultBuildLinksDrivers: the default build links a driver for
// every bucket scheme ParseLocation accepts.
func TestDefaultBuildLinksDrivers(t *testing.T) {
	var want []string
	for s := range bucketSchemes {
		want = append(want, s)
	}
	slices.Sort(want)
	if got := Drivers(); !slices.Equal(got, want) {
		t.Fatalf("Drivers() = %q, want %q", got, want)
	}
	for _, s := range want {
		if err := checkDriver(s); err != nil {
			t.Errorf("checkDriver(%q) = %v", s, err)
		}
	}
}
