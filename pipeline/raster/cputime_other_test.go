//go:build !unix

package raster

func processCPU() (int64, bool) { return 0, false }
