// Command scalegen is the Go half of scripts/scale.sh, which measures how
// segpipe's costs grow with the size of a dataset. It has nine
// sub-commands:
//
//	gen     synthesise N small images with many instances each, as RLE
//	        masks (the SA-1B shape) or as the same shapes as polygons
//	run     run a command and record its wall time, CPU time and peak RSS
//	note    add figures to a step record
//	sum     join the records of commands that together make one step
//	loader  open a shard set in this process and stream batches: time to
//	        the first batch, CPU per image, peak RSS, the resume state
//	raster  the CPU cost of rasterising one mask, RLE or polygon, alone
//	profile run a segpipe command in process under the CPU profiler
//	serve   start `segpipe serve`, stream its first batches over Arrow
//	        Flight, stop it and record the server's CPU time and peak RSS
//	report  join the step records into one JSON, print a table and check
//	        the bounds given on its command line
//
// Each measuring sub-command writes one JSON record (a Step) to --out; the
// script calls them in turn and report reads the records back. Everything
// runs in one process at a time, so figures are not disturbed by the
// measurement itself.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: scalegen gen|run|note|sum|loader|raster|profile|serve|report [flags]

  gen     --out DIR --images N [--side 64] [--per-image 100] [--masks rle|polygon] [--seed 1]
  run     --out STEP.json --step NAME [--n N] -- COMMAND [ARGS...]
  note    STEP.json KEY=VALUE...
  sum     --out STEP.json --step NAME STEP.json...
  loader  --out STEP.json --shards DIR [--batch 32] [--imgsz 128] [--batches K] [--consume C]
  raster  --out STEP.json --shards DIR [--imgsz 128]
  profile --cpuprofile FILE -- SEGPIPE_ARGS...
  serve   --out STEP.json --bin SEGPIPE --root DIR --set NAME [--batches K]
  report  --out RESULT.json DIR... [--check NAME:MAX ...]

Run "scalegen SUBCOMMAND -h" for the flags of one sub-command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "gen":
		err = genMain(args)
	case "run":
		err = runMain(args)
	case "loader":
		err = loaderMain(args)
	case "raster":
		err = rasterMain(args)
	case "profile":
		err = profileMain(args)
	case "serve":
		err = serveMain(args)
	case "note":
		err = noteMain(args)
	case "sum":
		err = sumMain(args)
	case "report":
		err = reportMain(args)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "scalegen: unknown sub-command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalegen:", err)
		os.Exit(1)
	}
}
