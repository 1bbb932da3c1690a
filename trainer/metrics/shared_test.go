package metrics

import (
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"
)

// sharedDir returns ../shared, or on a clone alone the module's copy of
// the goldens and coco-tiny annotations this package reads (internal/testenv/shared).
func sharedDir(t testing.TB) string {
	t.Helper()
	return shared.Dir(t)
}
