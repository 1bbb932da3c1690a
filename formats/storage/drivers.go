package storage

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
)

// ErrNoDriver is matched (errors.Is) by the error Open returns for a
// bucket URL whose cloud storage driver this binary does not link (a build
// with -tags nocloud).
var ErrNoDriver = errors.New("cloud storage driver not in this build")

// linkedDrivers holds the bucket schemes whose gocloud.dev/blob driver is
// linked into this binary. Each driver_*.go file registers its scheme from
// init, next to the blank import that links the driver, so a build tag that
// leaves a file out leaves its scheme out here too.
var linkedDrivers sync.Map // scheme → struct{}

func registerDriver(scheme string) { linkedDrivers.Store(scheme, struct{}{}) }

// Drivers returns the bucket schemes this binary can open, sorted.
func Drivers() []string {
	var s []string
	for scheme := range bucketSchemes {
		if _, ok := linkedDrivers.Load(scheme); ok {
			s = append(s, scheme)
		}
	}
	slices.Sort(s)
	return s
}

// checkDriver returns an error wrapping ErrNoDriver when the driver of
// scheme is not linked: it names the scheme, the build this binary is and
// the build that has the driver.
func checkDriver(scheme string) error {
	if _, ok := linkedDrivers.Load(scheme); ok {
		return nil
	}
	if err := omittedDriverError(scheme); err != nil {
		return err
	}
	return fmt.Errorf("%s:// needs the cloud storage drivers; this is the small build (%s); use the default build (go build, without -tags nocloud): %w",
		scheme, buildTags(), ErrNoDriver)
}

// buildTags describes the tags this binary was built with, as
// "-tags a,b", from its build information; "-tags nocloud" when the
// binary does not record them (a test binary).
func buildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" && strings.Contains(s.Value, "nocloud") {
				return "-tags " + s.Value
			}
		}
	}
	return "-tags nocloud"
}
