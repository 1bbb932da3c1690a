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
	v, path, err := DriverVersion()
	r.Driver = LibInfo{Name: LibCUDA.Name, Path: path, Err: err}
	if err == nil {
		r.Driver.Version = VersionString(v)
	}
	bv, bp, berr := CublasVersion()
	dv, dp, derr := CudnnVersion()
	r.Libraries = []LibInfo{
		{Name: LibCUBLAS.Name, Version: bv, Path: bp, Err: berr},
		{Name: LibCUDNN.Name, Version: dv, Path: dp, Err: derr},
	}
	if err != nil {
		r.GPUErr = err
		return r
	}
	r.GPUs, r.GPUErr = GPUs()
	return r
}
