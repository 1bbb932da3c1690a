//go:build nocuda

package cudastub

import "errors"

var errNoBinding = errors.New("cudastub: built with -tags nocuda")

type counters struct{}

// Calls is unavailable in a build without the run-time binding.
func (s *Stub) Calls() (uint64, error) { return 0, errNoBinding }

// CallsByName is unavailable in a build without the run-time binding.
func (s *Stub) CallsByName() (map[string]uint64, error) { return nil, errNoBinding }
