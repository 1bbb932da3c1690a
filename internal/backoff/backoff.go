// Package backoff is the wait between the attempts of a retry loop, the one
// definition the storage layer and the remote client share: the first wait,
// then twice the last, up to a cap.
package backoff

import (
	"context"
	"time"
)

// Backoff hands out the waits of one retry loop. Its zero value waits
// nothing; it is not safe for concurrent use.
type Backoff struct {
	next, max time.Duration
}

// New returns a Backoff whose first wait is first and whose waits double
// up to limit (a limit below first is first).
func New(first, limit time.Duration) *Backoff {
	return &Backoff{next: first, max: max(first, limit)}
}

// Delay is the wait the next call to Wait sleeps.
func (b *Backoff) Delay() time.Duration { return b.next }

// Wait sleeps Delay, then doubles the delay up to the cap. It returns
// ctx's error, early, when ctx ends first, and context.DeadlineExceeded at
// once, without sleeping, when ctx's deadline comes before the wait would
// end: the attempt after it could not be made in time, so the retry loop
// reports its last failure now rather than at the deadline, where a
// caller's own timer for the same deadline fires with less to say.
func (b *Backoff) Wait(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < b.next {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
	return nil
}
