//go:build !linux

package remote

func minorFaults() int64 { return 0 }
