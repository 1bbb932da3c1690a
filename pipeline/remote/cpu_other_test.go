//go:build !unix

package remote

func cpuSeconds() float64 { return 0 }
