package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeEnv builds a search environment over a temporary tree: files lists
// the library files that exist, vars the environment.
func fakeEnv(t *testing.T, vars map[string]string, files ...string) (searchEnv, string) {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := processEnv()
	env.getenv = func(k string) string { return strings.ReplaceAll(vars[k], "$ROOT", root) }
	return env, root
}

func TestCandidatesOrder(t *testing.T) {
	saveStd, savePy := standardDirs, pythonEnvs
	t.Cleanup(func() { standardDirs, pythonEnvs = saveStd, savePy })
	tests := []struct {
		name  string
		lib   library
		vars  map[string]string
		files []string
		std   []string
		py    []string
		want  []string // relative to the root; bare sonames stay bare
	}{{
		name:  "override alone, even when it does not exist",
		lib:   libCUDA,
		vars:  map[string]string{"SEGPIPE_LIBCUDA": "$ROOT/custom/libcuda.so.1", "LD_LIBRARY_PATH": "$ROOT/ld"},
		files: []string{"ld/libcuda.so.1"},
		want:  []string{"custom/libcuda.so.1"},
	}, {
		name:  "LD_LIBRARY_PATH before the standard paths",
		lib:   libCUDA,
		vars:  map[string]string{"LD_LIBRARY_PATH": "$ROOT/ld1:$ROOT/ld2"},
		files: []string{"std/libcuda.so.1", "ld2/libcuda.so.1", "ld1/libcuda.so"},
		std:   []string{"std"},
		want:  []string{"ld2/libcuda.so.1", "std/libcuda.so.1", "ld1/libcuda.so", "libcuda.so.1", "libcuda.so"},
	}, {
		name:  "the first directory wins over a newer major later; newest major first within a directory",
		lib:   libCUBLAS,
		vars:  map[string]string{"LD_LIBRARY_PATH": "$ROOT/old"},
		files: []string{"old/libcublas.so.12", "venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13", "std/libcublas.so.12", "std/libcublas.so.13"},
		std:   []string{"std"},
		py:    []string{"venv"},
		want: []string{"old/libcublas.so.12", "std/libcublas.so.13", "std/libcublas.so.12",
			"venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13", "libcublas.so.13", "libcublas.so.12"},
	}, {
		name:  "the active environment's wheels before the system's libraries",
		lib:   libCUBLAS,
		vars:  map[string]string{"VIRTUAL_ENV": "$ROOT/active", "LD_LIBRARY_PATH": "$ROOT/ld"},
		files: []string{"std/libcublas.so.13", "active/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12", "ld/libcublas.so.13"},
		std:   []string{"std"},
		want: []string{"ld/libcublas.so.13", "active/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
			"std/libcublas.so.13", "libcublas.so.13", "libcublas.so.12"},
	}, {
		name: "pip wheels of VIRTUAL_ENV before the configured environments",
		lib:  libCUDNN,
		vars: map[string]string{"VIRTUAL_ENV": "$ROOT/active"},
		files: []string{"torch/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
			"active/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"},
		py: []string{"torch"},
		want: []string{"active/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
			"torch/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9", "libcudnn.so.9"},
	}, {
		name: "nothing found: only the bare sonames for the loader's cache",
		lib:  libCUDNN,
		want: []string{"libcudnn.so.9"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, root := fakeEnv(t, tt.vars, tt.files...)
			standardDirs, pythonEnvs = nil, nil
			for _, d := range tt.std {
				standardDirs = append(standardDirs, filepath.Join(root, d))
			}
			for _, d := range tt.py {
				pythonEnvs = append(pythonEnvs, filepath.Join(root, d))
			}
			got := tt.lib.candidates(env)
			for i, g := range got {
				if r, err := filepath.Rel(root, g); err == nil && !strings.HasPrefix(r, "..") {
					got[i] = r
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("candidates:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestDepsMatchTheMajorFound(t *testing.T) {
	env, root := fakeEnv(t, nil, "d/libcublas.so.13", "d/libcublasLt.so.13", "d/libcublasLt.so.12")
	got := libCUBLAS.deps(filepath.Join(root, "d/libcublas.so.13"), env)
	want := []string{filepath.Join(root, "d/libcublasLt.so.13")}
	if !slices.Equal(got, want) {
		t.Errorf("deps = %q, want %q", got, want)
	}
}

// TestNoDriverFailsClearly holds the contract on a host without the CUDA
// driver (CI's): every entry point returns an error that wraps
// ErrUnavailable and names the missing library; nothing panics.
func TestNoDriverFailsClearly(t *testing.T) {
	t.Setenv("SEGPIPE_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	t.Setenv("SEGPIPE_LIBCUBLAS", filepath.Join(t.TempDir(), "libcublas.so.13"))
	t.Setenv("SEGPIPE_LIBCUDNN", filepath.Join(t.TempDir(), "libcudnn.so.9"))
	for _, lib := range []library{libCUDA, libCUBLAS, libCUDNN} {
		_, err := openLibrary(lib)
		if err == nil {
			t.Fatalf("%s: opened a library that does not exist", lib.Name)
		}
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), lib.Name) {
			t.Errorf("%s: error %q should wrap ErrUnavailable and name the library", lib.Name, err)
		}
		if bindingBuilt && !strings.Contains(err.Error(), lib.Env) {
			t.Errorf("%s: error %q should name the override variable %s", lib.Name, err, lib.Env)
		}
	}
}
