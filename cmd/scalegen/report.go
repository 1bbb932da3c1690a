package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// Run is the steps measured on one dataset.
type Run struct {
	Label string           `json:"label"`
	N     int64            `json:"n"`
	Steps map[string]*Step `json:"steps"`
}

// Check is one bound tested by report.
type Check struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Passed bool    `json:"passed"`
	Detail string  `json:"detail"`
}

// Result is the JSON report writes.
type Result struct {
	Runs   []*Run   `json:"runs"`
	Checks []*Check `json:"checks,omitempty"`
}

// stepOrder is the table's row order; other steps follow by name.
var stepOrder = []string{"gen", "convert", "convert-part", "manifest-merge", "inspect-verify", "loader", "raster", "loader-resume", "serve"}

// reportMain reads the step records of one or more run directories (each
// holding *.json Step files) and prints and writes them, then tests the
// bounds. A broken bound is an error naming it.
func reportMain(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("out", "", "write the joined result to `FILE`")
	pair := fs.String("pair", "", "`SMALL:LARGE` run labels to compare (flat cost, bounded memory)")
	maxRatio := fs.Float64("max-ratio", 2, "largest allowed LARGE/SMALL ratio of CPU per image (convert, loader)")
	rssRatio := fs.Float64("rss-ratio", 1.5, "largest allowed LARGE/SMALL peak RSS ratio of the loader and serve, over --rss-slack")
	rssSlack := fs.Float64("rss-slack-mib", 64, "peak RSS allowance in MiB added to SMALL·rss-ratio")
	ttfb := fs.Float64("max-first-batch", 5, "largest allowed time to the first batch in seconds (loader, resume, serve)")
	maxState := fs.Float64("max-state-bytes", 64, "largest allowed resume state (JSON bytes)")
	twin := fs.String("twin", "", "`RLE:POLYGON` run labels of the same shapes as RLE and as polygons, to compare per mask")
	maskRatio := fs.Float64("max-mask-ratio", 2, "largest allowed RLE/polygon ratio of the cost of one mask (convert CPU, rasterise time)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var res Result
	for _, dir := range fs.Args() {
		r, err := readRun(dir)
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, r)
	}
	if len(res.Runs) == 0 {
		return errors.New("report: no run directories given")
	}
	printTable(os.Stdout, res.Runs)
	res.Checks = checks(res.Runs, *pair, *maxRatio, *rssRatio, *rssSlack*(1<<20), *ttfb, *maxState)
	res.Checks = append(res.Checks, twinChecks(res.Runs, *twin, *maskRatio)...)
	failed := 0
	if len(res.Checks) > 0 {
		fmt.Println()
		for _, c := range res.Checks {
			verdict := "ok"
			if !c.Passed {
				verdict, failed = "FAILED", failed+1
			}
			fmt.Printf("%-6s %-40s %10.3f (limit %g)  %s\n", verdict, c.Name, c.Value, c.Limit, c.Detail)
		}
	}
	if *out != "" {
		b, err := json.MarshalIndent(&res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("report: %d bound(s) broken; see the FAILED lines above", failed)
	}
	return nil
}

func readRun(dir string) (*Run, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	r := &Run{Label: filepath.Base(dir), Steps: map[string]*Step{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		var s Step
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("report: %s: %w", f, err)
		}
		r.Steps[s.Step] = &s
		r.N = max(r.N, s.N)
	}
	if len(r.Steps) == 0 {
		return nil, fmt.Errorf("report: no step records in %s", dir)
	}
	return r, nil
}

func sortedSteps(r *Run) []string {
	rank := map[string]int{}
	for i, s := range stepOrder {
		rank[s] = i + 1
	}
	var names []string
	for k := range r.Steps {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := rank[names[i]], rank[names[j]]
		if a == 0 {
			a = 1 << 20
		}
		if b == 0 {
			b = 1 << 20
		}
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	return names
}

// perImageCPU is a step's CPU per image in microseconds: per image
// streamed for the loader and serve, per dataset image otherwise.
func perImageCPU(s *Step) float64 {
	n := float64(s.N)
	if v := s.Extra["images"]; v > 0 {
		n = v
	}
	if n == 0 {
		return 0
	}
	return s.CPUS / n * 1e6
}

func printTable(w0 *os.File, runs []*Run) {
	w := tabwriter.NewWriter(w0, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "run\tstep\timages\twall s\tCPU s\tCPU µs/image\tpeak RSS MiB\tnotes\t")
	for _, r := range runs {
		for _, name := range sortedSteps(r) {
			s := r.Steps[name]
			fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%s\t\n", r.Label, name, s.N, s.WallS, s.CPUS,
				perImageCPU(s), float64(s.MaxRSSBytes)/(1<<20), notes(s))
		}
	}
	w.Flush()
}

func notes(s *Step) string {
	e := s.Extra
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	if v, ok := e["first_batch_s"]; ok {
		add("first batch %.2fs", v)
	}
	if v, ok := e["first_batch_since_start_s"]; ok {
		add("first batch %.2fs after start (%.2fs after request)", v, e["first_batch_since_request_s"])
	}
	if v, ok := e["images"]; ok {
		add("%g images streamed", v)
	}
	if v, ok := e["raster_ns_per_mask"]; ok && e["masks"] > 0 {
		add("%.0f masks, raster %.0f ns/mask", e["masks"], v)
	}
	if v := e["instances"]; v > 0 {
		add("%.0f instances, %.2f µs CPU/instance", v, s.CPUS/v*1e6)
	}
	if v := e["cpu_ns_per_mask"]; v > 0 {
		add("%.0f ns CPU/mask rasterised alone", v)
	}
	if v, ok := e["order_bytes"]; ok && s.N > 0 {
		add("order %.1f B/image", v/float64(s.N))
	}
	if v, ok := e["state_json_bytes"]; ok {
		add("state %g B", v)
	}
	return strings.Join(parts, "; ")
}

func find(runs []*Run, label string) *Run {
	for _, r := range runs {
		if r.Label == label {
			return r
		}
	}
	return nil
}

func checks(runs []*Run, pair string, maxRatio, rssRatio, rssSlack, ttfb, maxState float64) []*Check {
	var cs []*Check
	add := func(name string, v, limit float64, detail string) {
		cs = append(cs, &Check{Name: name, Value: v, Limit: limit, Passed: v <= limit, Detail: detail})
	}
	for _, r := range runs {
		if s := r.Steps["loader"]; s != nil {
			add(r.Label+": loader first batch s", s.Extra["first_batch_s"], ttfb, "process start to the first batch")
		}
		if s := r.Steps["loader-resume"]; s != nil {
			add(r.Label+": resumed loader first batch s", s.Extra["first_batch_s"], ttfb,
				fmt.Sprintf("started at consumed=%g", s.Extra["consumed_at_start"]))
			add(r.Label+": resume state bytes", s.Extra["state_json_bytes"], maxState, "order.State as JSON")
		}
		if s := r.Steps["serve"]; s != nil {
			add(r.Label+": serve first batch s", s.Extra["first_batch_since_start_s"], ttfb, "server start, set opened, first batch received")
		}
	}
	if pair == "" {
		return cs
	}
	a, b, ok := strings.Cut(pair, ":")
	ra, rb := find(runs, a), find(runs, b)
	if !ok || ra == nil || rb == nil {
		add("pair "+pair+" present", 1, 0, "no such runs")
		return cs
	}
	for _, step := range []string{"convert", "loader"} {
		sa, sb := ra.Steps[step], rb.Steps[step]
		if sa == nil || sb == nil {
			continue
		}
		pa, pb := perImageCPU(sa), perImageCPU(sb)
		add(fmt.Sprintf("%s CPU/image %s÷%s", step, b, a), pb/pa, maxRatio,
			fmt.Sprintf("%.1f vs %.1f µs/image", pb, pa))
	}
	for _, step := range []string{"loader", "serve"} {
		sa, sb := ra.Steps[step], rb.Steps[step]
		if sa == nil || sb == nil {
			continue
		}
		limit := float64(sa.MaxRSSBytes)*rssRatio + rssSlack
		slope := float64(sb.MaxRSSBytes-sa.MaxRSSBytes) / float64(max(sb.N-sa.N, 1))
		add(fmt.Sprintf("%s peak RSS MiB at %s", step, b), float64(sb.MaxRSSBytes)/(1<<20), limit/(1<<20),
			fmt.Sprintf("%.1f MiB at %s; %+.0f B per added image", float64(sa.MaxRSSBytes)/(1<<20), a, slope))
	}
	sa, sb := ra.Steps["loader-resume"], rb.Steps["loader-resume"]
	if sa != nil && sb != nil {
		add("resume state fixed bytes "+b+"−"+a, sb.Extra["state_fixed_bytes"]-sa.Extra["state_fixed_bytes"], 0,
			fmt.Sprintf("JSON %g vs %g B (the digits of consumed)", sb.Extra["state_json_bytes"], sa.Extra["state_json_bytes"]))
	}
	return cs
}

// twinChecks compares the cost of one mask in the RLE run with the
// polygon run of the same shapes: conversion CPU per instance and the CPU
// of rasterising one mask alone (the raster step; the loader's stage
// times are wall times, inflated on a busy machine).
func twinChecks(runs []*Run, twin string, maxRatio float64) []*Check {
	if twin == "" {
		return nil
	}
	a, b, ok := strings.Cut(twin, ":")
	rr, rp := find(runs, a), find(runs, b)
	if !ok || rr == nil || rp == nil {
		return []*Check{{Name: "twin " + twin + " present", Value: 1, Limit: 0, Detail: "no such runs"}}
	}
	var cs []*Check
	add := func(name string, v, w float64, unit string) {
		if v <= 0 || w <= 0 {
			cs = append(cs, &Check{Name: name, Value: 0, Limit: maxRatio, Passed: false,
				Detail: fmt.Sprintf("not measured (%.3g %s RLE, %.3g polygon): no masks reached the step", v, unit, w)})
			return
		}
		cs = append(cs, &Check{Name: name, Value: v / w, Limit: maxRatio, Passed: v/w <= maxRatio,
			Detail: fmt.Sprintf("%.3g vs %.3g %s", v, w, unit)})
	}
	perInst := func(s *Step) float64 {
		if s == nil || s.Extra["instances"] == 0 {
			return 0
		}
		return s.CPUS / s.Extra["instances"] * 1e6
	}
	add("convert CPU per mask, RLE÷polygon", perInst(rr.Steps["convert"]), perInst(rp.Steps["convert"]), "µs/mask")
	raster := func(s *Step) float64 {
		if s == nil {
			return 0
		}
		return s.Extra["cpu_ns_per_mask"]
	}
	add("rasterise CPU per mask, RLE÷polygon", raster(rr.Steps["raster"]), raster(rp.Steps["raster"]), "ns/mask")
	return cs
}
