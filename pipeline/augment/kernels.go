package augment

// forceGoKernels makes the dispatchers use the Go kernels even where a
// vector version exists: tests and benchmarks compare the two.
var forceGoKernels bool
