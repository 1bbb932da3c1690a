//go:build cgo

package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"unsafe"

	"github.com/segpipe/segpipe/cli"
)

// segpipe_cli runs the segpipe command line with argv (argv[0] is the
// program name, as for main) in the calling thread and returns its exit
// code (cli.Run's: 0, 1 or 2). The command reads and writes the process's
// file descriptors 0, 1 and 2, as the binary does. It is the Python
// package's `segpipe` console script, so that the wheel carries one native
// library for the loader and the CLI; a host calls it once, as a program
// calls main: the command takes the process's collector target and
// GOMAXPROCS the binary would, and a command that asks for SIGINT and
// SIGTERM (convert, train, serve) keeps Go's handler for them after it
// returns.
//
//export segpipe_cli
func segpipe_cli(argc C.int, argv **C.char) (code C.int) {
	defer func() {
		if p := recover(); p != nil {
			// An unrecovered panic ends the binary with status 2 after
			// printing it; the host process survives, told the same.
			fmt.Fprintf(os.Stderr, "panic: %v\n\n%s", p, debug.Stack())
			code = C.int(cli.ExitUsage)
		}
	}()
	cli.SetGCTarget()
	// procs.go's spare P is for a host that calls into a running loader;
	// a command is the whole program, as in the binary.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(cores)
	}
	cli.Version = version
	return C.int(cli.Run(context.Background(), cArgs(argc, argv), os.Stdout, os.Stderr))
}

// cArgs copies a C argv of argc strings (NULL entries read as empty).
func cArgs(argc C.int, argv **C.char) []string {
	if argc <= 0 || argv == nil {
		return []string{"segpipe"}
	}
	ptrs := unsafe.Slice(argv, int(argc))
	args := make([]string, len(ptrs))
	for i, p := range ptrs {
		if p != nil {
			args[i] = C.GoString(p)
		}
	}
	return args
}
