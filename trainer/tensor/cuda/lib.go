package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// library names one shared library this package binds at run time.
type library struct {
	// Name is how messages call it ("CUDA driver", "cuBLAS", "cuDNN").
	Name string
	// Env names the variable that overrides discovery with a full path.
	Env string
	// Sonames are the file names tried, most preferred first.
	Sonames []string
	// Deps are libraries loaded from the directory the library was found
	// in, before it, when they exist there (cuBLAS needs cuBLASLt; cuDNN 9
	// opens its sub-libraries by soname).
	Deps []string
	// ByDirectory searches directory by directory (each directory's
	// sonames newest first) rather than soname by soname: for the CUDA
	// toolkit's libraries, whose directories each hold one CUDA version.
	// The driver is searched soname first: libcuda.so.1 anywhere beats a
	// development libcuda.so link earlier in the path.
	ByDirectory bool
}

// The libraries bound by this package.
var (
	libCUDA = library{Name: "CUDA driver", Env: "SEGPIPE_LIBCUDA",
		Sonames: []string{"libcuda.so.1", "libcuda.so"}}
	libCUBLAS = library{Name: "cuBLAS", Env: "SEGPIPE_LIBCUBLAS",
		Sonames: []string{"libcublas.so.13", "libcublas.so.12"},
		Deps:    []string{"libcublasLt.so.13", "libcublasLt.so.12"}, ByDirectory: true}
	libCUDNN = library{Name: "cuDNN", Env: "SEGPIPE_LIBCUDNN",
		Sonames: []string{"libcudnn.so.9"},
		Deps: []string{"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
			"libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
			"libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"}, ByDirectory: true}
)

// libNVRTC is the runtime compiler cuDNN 9's runtime-compiled engines
// open by soname; preloaded (optional) from the directories searched, of
// cuBLAS's CUDA major, so that those engines find it where a wheel put it.
var libNVRTC = library{Name: "NVRTC", Env: "SEGPIPE_LIBNVRTC",
	Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"}, ByDirectory: true}

// standardDirs are searched after LD_LIBRARY_PATH and the active Python
// environment: where distributions,
// the NVIDIA driver packages, the CUDA toolkit and WSL put the libraries.
var standardDirs = []string{
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib64",
	"/usr/lib",
	"/usr/local/cuda/lib64",
	"/usr/local/cuda/targets/x86_64-linux/lib",
	"/usr/local/cuda/targets/sbsa-linux/lib",
	"/usr/lib/wsl/lib",
}

// pythonEnvs are Python environments whose pip-installed NVIDIA wheels
// (site-packages/nvidia/*/lib) are searched last, after the system's; the
// active environment's (VIRTUAL_ENV, CONDA_PREFIX) come before the
// system's, as its Python's own imports would load them.
var pythonEnvs = []string{"/opt/torch/.venv"}

// searchEnv is what discovery reads from the process: tests replace it.
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
	exists func(string) bool
}

func processEnv() searchEnv {
	return searchEnv{
		getenv: os.Getenv,
		glob:   filepath.Glob,
		exists: func(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() },
	}
}

// searchDirs returns the directories searched for libraries, in order:
// LD_LIBRARY_PATH, the nvidia/*/lib folders of the active Python
// environment (VIRTUAL_ENV, CONDA_PREFIX), StandardDirs, then those of
// pythonEnvs. An active environment's wheels come before the system's
// libraries because they are one CUDA version built to go together (its
// PyTorch runs on them), where a system directory may hold another.
func searchDirs() []string { return processEnv().dirs() }

func (e searchEnv) dirs() []string {
	var out []string
	add := func(d string) {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	wheels := func(roots ...string) {
		for _, root := range roots {
			if root == "" {
				continue
			}
			for _, pat := range []string{"lib/python3*/site-packages/nvidia/*/lib", "lib64/python3*/site-packages/nvidia/*/lib"} {
				m, _ := e.glob(filepath.Join(root, pat))
				slices.Sort(m)
				for _, d := range m {
					add(d)
				}
			}
		}
	}
	for _, d := range strings.Split(e.getenv("LD_LIBRARY_PATH"), ":") {
		add(d)
	}
	wheels(e.getenv("VIRTUAL_ENV"), e.getenv("CONDA_PREFIX"))
	for _, d := range standardDirs {
		add(d)
	}
	wheels(pythonEnvs...)
	return out
}

// Candidates returns the paths tried for lib, in order: the override
// variable's path alone when it is set, otherwise every soname in every
// search directory where the file exists, then the bare sonames (for the
// dynamic loader's own cache). The caller tries them in order and takes the
// first that loads.
func (lib library) Candidates() []string { return lib.candidates(processEnv()) }

func (lib library) candidates(e searchEnv) []string {
	if p := e.getenv(lib.Env); p != "" {
		return []string{p}
	}
	var out []string
	// The toolkit's libraries directory first, then soname (newest major
	// first within a directory): the libraries of one directory, or one environment's
	// wheels, are one CUDA version, and taking cuBLAS 13 from one place
	// beside a cuDNN built for CUDA 12 from another fails at run time
	// (checkMajors refuses such a mix).
	dirs := e.dirs()
	try := func(d, name string) {
		if p := filepath.Join(d, name); e.exists(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if lib.ByDirectory {
		for _, d := range dirs {
			for _, name := range lib.Sonames {
				try(d, name)
			}
		}
	} else {
		for _, name := range lib.Sonames {
			for _, d := range dirs {
				try(d, name)
			}
		}
	}
	return append(out, lib.Sonames...)
}

// deps returns the dependency paths present beside a library found at path.
func (lib library) deps(path string, e searchEnv) []string {
	var out []string
	dir := filepath.Dir(path)
	major := path[strings.LastIndex(path, ".so"):] // ".so.13": only the matching major
	for _, d := range lib.Deps {
		if p := filepath.Join(dir, d); strings.HasSuffix(d, major) && e.exists(p) {
			out = append(out, p)
		}
	}
	return out
}
