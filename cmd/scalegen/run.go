package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Step is one measurement: a command or an in-process phase, with its wall
// time, CPU time (user + system) and peak resident set size. N is the
// dataset's image count; Extra holds figures particular to the step
// (batches, images streamed, time to the first batch, state bytes, …).
type Step struct {
	Step        string             `json:"step"`
	N           int64              `json:"n"`
	WallS       float64            `json:"wall_s"`
	CPUS        float64            `json:"cpu_s"`
	MaxRSSBytes int64              `json:"max_rss_bytes"`
	Extra       map[string]float64 `json:"extra,omitempty"`
	Command     []string           `json:"command,omitempty"`
}

func writeStep(path string, s *Step) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write step %s: %w", s.Step, err)
	}
	return nil
}

// rusageOf returns CPU seconds and peak RSS in bytes of a finished child
// (Linux reports ru_maxrss in KiB).
func rusageOf(ps *os.ProcessState) (cpu float64, rss int64) {
	cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		rss = int64(ru.Maxrss) << 10
	}
	return cpu, rss
}

// selfRusage returns this process's CPU seconds and peak RSS in bytes.
func selfRusage() (cpu float64, rss int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime), int64(ru.Maxrss) << 10
}

// runMain runs a command with its output passed through and records it.
func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	out := fs.String("out", "", "write the step record to `FILE`")
	step := fs.String("step", "", "step `NAME`")
	n := fs.Int64("n", 0, "images in the dataset")
	extra := map[string]float64{}
	fs.Func("extra", "record `KEY=VALUE` (a number) with the step; repeatable", func(kv string) error {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return fmt.Errorf("want KEY=NUMBER, got %q", kv)
		}
		extra[k] = f
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if *out == "" || *step == "" || len(argv) == 0 {
		return errors.New("run: want --out FILE --step NAME -- COMMAND [ARGS...]")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0).Seconds()
	if cmd.ProcessState == nil {
		return fmt.Errorf("run %s: %w", *step, err)
	}
	cpu, rss := rusageOf(cmd.ProcessState)
	if err != nil {
		return fmt.Errorf("run %s: %v: %w", *step, argv, err)
	}
	return writeStep(*out, &Step{Step: *step, N: *n, WallS: wall, CPUS: cpu, MaxRSSBytes: rss, Command: argv, Extra: extra})
}

// sumMain joins step records into one: wall and CPU times add up (the
// commands ran one after another), peak RSS is the largest. It records a
// computation split into processes, such as the parts of a distributed
// conversion, as one step.
func sumMain(args []string) error {
	fs := flag.NewFlagSet("sum", flag.ContinueOnError)
	out := fs.String("out", "", "write the joined record to `FILE`")
	step := fs.String("step", "", "step `NAME`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *step == "" || fs.NArg() == 0 {
		return errors.New("sum: want --out FILE --step NAME STEP.json...")
	}
	s := &Step{Step: *step, Extra: map[string]float64{"processes": float64(fs.NArg())}}
	for _, f := range fs.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("sum: %w", err)
		}
		var p Step
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("sum: %s: %w", f, err)
		}
		s.N = max(s.N, p.N)
		s.WallS += p.WallS
		s.CPUS += p.CPUS
		s.MaxRSSBytes = max(s.MaxRSSBytes, p.MaxRSSBytes)
		s.Command = append(s.Command, strings.Join(p.Command, " "))
		for k, v := range p.Extra {
			s.Extra[k] = max(s.Extra[k], v)
		}
	}
	return writeStep(*out, s)
}

// noteMain adds KEY=VALUE figures to an existing step record, such as a
// count a command printed.
func noteMain(args []string) error {
	if len(args) < 2 {
		return errors.New("note: want STEP.json KEY=VALUE...")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return fmt.Errorf("note: %w", err)
	}
	var s Step
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("note: %s: %w", args[0], err)
	}
	if s.Extra == nil {
		s.Extra = map[string]float64{}
	}
	for _, kv := range args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return fmt.Errorf("note: want KEY=NUMBER, got %q", kv)
		}
		s.Extra[k] = f
	}
	return writeStep(args[0], &s)
}
