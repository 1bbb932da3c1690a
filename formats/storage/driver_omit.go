package storage

import (
	"fmt"
	"sync"
)

// omittedDrivers holds, for each bucket scheme whose driver one of
// segpipe's per-driver build tags left out (segpipe_no_gcs,
// segpipe_no_azblob), that tag, so that the error for such a URL names
// what this build lacks and how to get it. Schemes left out by nocloud
// are not here: that build has its own message.
var omittedDrivers sync.Map // scheme → build tag

func omitDriver(scheme, tag string) { omittedDrivers.Store(scheme, tag) }

// omittedDriverError returns the error for a URL of scheme when a
// per-driver build tag left its driver out, or nil.
func omittedDriverError(scheme string) error {
	tag, ok := omittedDrivers.Load(scheme)
	if !ok {
		return nil
	}
	return fmt.Errorf("%s:// support is not in this build (built with -tags %s to keep it small); "+
		"build it without that tag (the Python package from source, with every driver: pip install "+
		"--no-binary segpipe segpipe where Go is installed), or use the segpipe CLI binary "+
		"(go install github.com/segpipe/segpipe@latest), which has every driver: %w", scheme, tag, ErrNoDriver)
}
