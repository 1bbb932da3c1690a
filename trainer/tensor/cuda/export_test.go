package cuda

import "sync"

// ReopenLibraries forgets the libraries opened (or failed to open) so far,
// so that the next call opens them again from the current environment:
// the stub-driver tests point SEGPIPE_LIBCUDA and its siblings at a stub
// after other tests of this binary looked for a real driver.
func ReopenLibraries() {
	driverOnce, driverAPI, driverErr = sync.Once{}, nil, nil
	cublasOnce, cublasLib, cublasErr = sync.Once{}, nil, nil
	cudnnOnce, cudnnLib, cudnnErr = sync.Once{}, nil, nil
	nvrtcOnce, nvrtcPath = sync.Once{}, ""
	ForgetPlanCache()
}

// ForgetPlanCache drops the process's copy of the algorithm cache, so the
// next plan reads the file again as a new process would.
func ForgetPlanCache() {
	plans.mu.Lock()
	plans.loaded, plans.m, plans.path = false, nil, ""
	plans.mu.Unlock()
}

// BindingBuilt reports whether this build binds the libraries at all
// (false under -tags nocuda).
const BindingBuilt = bindingBuilt

// Open, Pool and the environment variables' names, for the loading tests
// outside the package.
var Open = open

type Pool = poolShape

const (
	AlgoEnv      = algoEnv
	PlanCacheEnv = planCacheEnv
)
