//go:build nocuda

package cudastub

import "errors"

// Calls is unavailable in a build without the run-time binding.
func (s *Stub) Calls() (uint64, error) {
	return 0, errors.New("cudastub: built with -tags nocuda")
}
