package backend

// Fetcher is implemented by backends whose Download waits on the host for
// every kernel queued before it (cuda). Fetch queues the copy of a buffer
// to the host behind that work and returns at once; the values are read
// later, when the host has queued more work. A training step fetches its
// loss result and reads it once the next step is queued, so the device
// never idles while the host reads a result and then queues the rest of
// the step. A backend without it (cpu, emu) runs kernels as they are
// queued, so Download there costs no wait.
type Fetcher interface {
	// Fetch queues the copy of src (its values as they are once the work
	// queued so far has run) and counts it in Transfers as one download
	// of its bytes, as Download counts it. Kernels queued after Fetch may
	// overwrite src. Errors are device errors.
	Fetch(src Buffer) (Fetched, error)
}

// Fetched is a copy to the host on its way.
type Fetched interface {
	// Wait waits for the copy and writes the values into dst, len(dst) ==
	// the fetched buffer's Len. It may be called once; it is what
	// releases the copy's resources.
	Wait(dst []float32) error
}
