package metrics

import (
	"testing"

	"github.com/segpipe/segpipe/internal/shared"
)

// sharedDir returns ../shared relative to the repository root (the
// directory holding go.mod), skipping the test when it is absent.
func sharedDir(t testing.TB) string {
	t.Helper()
	return shared.Dir(t)
}
