package cuda

// LibInfo is what discovery found for one library.
type LibInfo struct {
	Name    string
	Version string
	Path    string
	Err     error // nil when the library loaded
}

// Report is what the host offers: the driver, the libraries and the GPUs.
type Report struct {
	Driver    LibInfo
	Libraries []LibInfo // cuBLAS, cuDNN
	GPUs      []GPU
	GPUErr    error // why GPUs is empty
}

// Probe loads whatever it can and reports each part separately, so that a
// host with a driver but no cuDNN still shows its GPUs. It never panics.
func Probe() Report {
	var r Report
	v, path, err := driverVersion()
	r.Driver = LibInfo{Name: libCUDA.Name, Path: path, Err: err}
	if err == nil {
		r.Driver.Version = versionString(v)
	}
	bv, bp, berr := cublasVersion()
	dv, dp, derr := cudnnVersion()
	r.Libraries = []LibInfo{
		{Name: libCUBLAS.Name, Version: bv, Path: bp, Err: berr},
		{Name: libCUDNN.Name, Version: dv, Path: dp, Err: derr},
	}
	if err != nil {
		r.GPUErr = err
		return r
	}
	r.GPUs, r.GPUErr = gpus()
	return r
}
