package augment

// forceGoKernels makes the dispatchers use the Go kernels even where a
// vector version exists: tests and benchmarks compare the two.
var forceGoKernels bool

// forceAVX2 makes the dispatchers skip the AVX-512 kernels, so that tests
// and benchmarks reach the AVX2 ones on CPUs that have both.
var forceAVX2 bool
