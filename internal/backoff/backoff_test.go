package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelaysDoubleUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		first, max time.Duration
		want       []time.Duration
	}{
		{time.Microsecond, 5 * time.Microsecond, []time.Duration{1e3, 2e3, 4e3, 5e3, 5e3}},
		{3 * time.Microsecond, time.Microsecond, []time.Duration{3e3, 3e3, 3e3}}, // a cap below the first wait
		{0, time.Second, []time.Duration{0, 0}},
	} {
		b := New(tc.first, tc.max)
		for i, want := range tc.want {
			if got := b.Delay(); got != want {
				t.Fatalf("New(%v, %v): wait %d is %v, want %v", tc.first, tc.max, i, got, want)
			}
			if err := b.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := New(time.Hour, time.Hour)
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context: %v, want context.Canceled", err)
	}
	if b.Delay() != time.Hour {
		t.Errorf("a cut-short wait doubled the delay to %v", b.Delay())
	}
}

func TestWaitPastTheDeadlineEndsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		delay    time.Duration
		want     error
	}{
		{"the wait would pass the deadline", time.Hour, 2 * time.Hour, context.DeadlineExceeded},
		{"the wait ends before it", time.Hour, time.Millisecond, nil},
		{"the deadline has passed", -time.Second, 0, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			b := New(tc.delay, tc.delay)
			// Without the rule the first case sleeps until the test's
			// own timeout.
			if err := b.Wait(ctx); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("Wait: %v, want %v", err, tc.want)
			}
			if tc.want != nil && b.Delay() != tc.delay {
				t.Errorf("a wait not begun doubled the delay to %v", b.Delay())
			}
		})
	}
}
