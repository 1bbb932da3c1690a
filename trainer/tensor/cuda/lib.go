package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Library names one shared library this package binds at run time.
type Library struct {
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
}

// The libraries bound by this package.
var (
	LibCUDA = Library{Name: "CUDA driver", Env: "SEGPIPE_LIBCUDA",
		Sonames: []string{"libcuda.so.1", "libcuda.so"}}
	LibCUBLAS = Library{Name: "cuBLAS", Env: "SEGPIPE_LIBCUBLAS",
		Sonames: []string{"libcublas.so.13", "libcublas.so.12"},
		Deps:    []string{"libcublasLt.so.13", "libcublasLt.so.12"}}
	LibCUDNN = Library{Name: "cuDNN", Env: "SEGPIPE_LIBCUDNN",
		Sonames: []string{"libcudnn.so.9"},
		Deps: []string{"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
			"libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
			"libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"}}
)

// StandardDirs are searched after LD_LIBRARY_PATH: where distributions,
// the NVIDIA driver packages, the CUDA toolkit and WSL put the libraries.
var StandardDirs = []string{
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib64",
	"/usr/lib",
	"/usr/local/cuda/lib64",
	"/usr/local/cuda/targets/x86_64-linux/lib",
	"/usr/local/cuda/targets/sbsa-linux/lib",
	"/usr/lib/wsl/lib",
}

// PythonEnvs are Python environments whose pip-installed NVIDIA wheels
// (site-packages/nvidia/*/lib) are searched last; VIRTUAL_ENV and
// CONDA_PREFIX are searched before them when set.
var PythonEnvs = []string{"/opt/torch/.venv"}

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

// SearchDirs returns the directories searched for libraries, in order:
// LD_LIBRARY_PATH, StandardDirs, then the nvidia/*/lib folders of the
// Python environments (VIRTUAL_ENV, CONDA_PREFIX, PythonEnvs).
func SearchDirs() []string { return processEnv().dirs() }

func (e searchEnv) dirs() []string {
	var out []string
	add := func(d string) {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, d := range strings.Split(e.getenv("LD_LIBRARY_PATH"), ":") {
		add(d)
	}
	for _, d := range StandardDirs {
		add(d)
	}
	envs := []string{e.getenv("VIRTUAL_ENV"), e.getenv("CONDA_PREFIX")}
	envs = append(envs, PythonEnvs...)
	for _, root := range envs {
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
	return out
}

// Candidates returns the paths tried for lib, in order: the override
// variable's path alone when it is set, otherwise every soname in every
// search directory where the file exists, then the bare sonames (for the
// dynamic loader's own cache). The caller tries them in order and takes the
// first that loads.
func (lib Library) Candidates() []string { return lib.candidates(processEnv()) }

func (lib Library) candidates(e searchEnv) []string {
	if p := e.getenv(lib.Env); p != "" {
		return []string{p}
	}
	var out []string
	// Soname first, then directory: a libcublas.so.13 anywhere beats a
	// libcublas.so.12 earlier in the path, so the newest major wins.
	for _, name := range lib.Sonames {
		for _, d := range e.dirs() {
			p := filepath.Join(d, name)
			if e.exists(p) && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return append(out, lib.Sonames...)
}

// deps returns the dependency paths present beside a library found at path.
func (lib Library) deps(path string, e searchEnv) []string {
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
