package arena

import (
	"context"
	"sync"
)

// Ordered calls load(i) for every i in [0, n) on Workers(workers)
// goroutines, at most twice that many ahead of the consumer, and
// consume(i, v) for each result in index order on the calling goroutine.
// The first error from consume or ctx stops it and is returned.
func Ordered[T any](ctx context.Context, n, workers int, load func(i int) T, consume func(i int, v T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := Workers(workers)
	type job struct {
		i   int
		out chan T
	}
	jobs := make(chan job)
	futures := make(chan chan T, 2*w)
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.out <- load(j.i)
			}
		}()
	}
	go func() {
		defer close(futures)
		defer close(jobs)
		for i := range n {
			out := make(chan T, 1)
			select {
			case futures <- out:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- job{i, out}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var err error
	i := 0
	for out := range futures {
		var v T
		select {
		case v = <-out:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			err = consume(i, v)
		}
		if err != nil {
			break
		}
		i++
	}
	// The producer also stops on a cancelled ctx and closes futures, so the
	// loop can end early without having seen ctx.Done itself.
	if err == nil && i < n {
		err = ctx.Err()
	}
	cancel()
	for range futures {
	}
	wg.Wait()
	return err
}
