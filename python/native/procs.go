//go:build cgo

package main

import (
	"os"
	"runtime"
	"sync"
)

// cores is the number of loader workers a session gets by default: the
// GOMAXPROCS the runtime chose for this process (its CPUs, or its cgroup
// quota), before init below raises it.
var cores = runtime.GOMAXPROCS(0)

// spareP gives the Go runtime one P more than the workers use, once, when
// the first local loader opens. The host's threads call into Go for every
// batch (the stream's get_next) and for every batch it drops (the release
// callback), and a call from a C thread needs a P. With one P per core all
// of them are busy with workers decoding images, so the call waits for a
// worker's time slice to end (up to the scheduler's 10 ms), and Python
// makes that wait holding the GIL (a batch is released from a dealloc):
// the thread that reads the next batch waits for the GIL, the workers fill
// the prefetch and go idle. On two cores the process kept 1.63 of them
// busy this way and 1.91 with the spare P (960 images, batch 32, 640 px;
// BENCHMARKS.md). A GOMAXPROCS set in the environment is left as it is.
//
// A process that only reads from servers (options "remote") runs no
// workers and keeps GOMAXPROCS as the runtime chose it: there an idle P
// costs CPU. gRPC hands each 16 KiB frame from its reading goroutine to
// the stream's, and with a P idle the runtime wakes a thread for each
// hand-off: on one core, 19.4 against 13.8 ms of client CPU a b32@640
// batch (python/tests/profile_flight_client.py, native-raw).
var spareP = sync.OnceFunc(func() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(cores + 1)
	}
})
