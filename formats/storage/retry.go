package storage

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"gocloud.dev/gcerrors"

	"github.com/segpipe/segpipe/internal/backoff"
)

// retry runs fn until it succeeds, fails permanently, the context ends or
// the retries are spent, sleeping an exponential backoff in between.
func (d *Dir) retry(ctx context.Context, fn func(context.Context) error) error {
	wait := backoff.New(d.opts.RetryDelay, MaxRetryDelay)
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil || !transient(err) || attempt >= d.opts.Retries || ctx.Err() != nil {
			return err
		}
		slog.Debug("retrying a storage request", "location", d.loc.String(), "attempt", attempt+1, "delay", wait.Delay(), "reason", err.Error())
		if wait.Wait(ctx) != nil {
			return err
		}
	}
}

// transient reports whether a request that failed with err may succeed
// when repeated: not for a missing object, a refused permission or a bad
// request, and not once the caller gave up.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true // a body cut short
	}
	// A definite answer from the server to a bad request (a wrong bucket
	// name, a missing permission) stays the same however often it is
	// asked; only timeouts and throttling among the 4xx are worth another
	// try. The AWS SDK's errors carry the status; others are classified
	// by gcerrors below.
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		if c := st.HTTPStatusCode(); c >= 400 && c < 500 && c != 408 && c != 429 {
			return false
		}
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument,
		gcerrors.AlreadyExists, gcerrors.FailedPrecondition, gcerrors.Unimplemented, gcerrors.Canceled:
		return false
	}
	return true
}
