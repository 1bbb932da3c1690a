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
