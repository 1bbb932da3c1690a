package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/segpipe/segpipe/cli"
)

// profileMain runs a segpipe command in this process under the CPU
// profiler: the commands have no profiling flag of their own (but bench),
// and a scaling question is answered by comparing two profiles.
func profileMain(args []string) error {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	out := fs.String("cpuprofile", "", "write the CPU profile to `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return errors.New("profile: want --cpuprofile FILE -- SEGPIPE_ARGS...")
	}
	// As the segpipe binary does (main.go).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(25)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	code := cli.Run(context.Background(), append([]string{"segpipe"}, fs.Args()...), os.Stdout, os.Stderr)
	pprof.StopCPUProfile()
	if code != 0 {
		return fmt.Errorf("profile: segpipe %v exited %d", fs.Args(), code)
	}
	return nil
}
