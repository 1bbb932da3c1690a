package parfor

import (
	"sync/atomic"
	"testing"
)

func TestBlocksCoverEveryIndexOnce(t *testing.T) {
	for _, tc := range []struct{ w, n int }{{1, 10}, {3, 10}, {16, 5}, {0, 1000}, {4, 0}} {
		hits := make([]int32, tc.n)
		Blocks(tc.w, tc.n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&hits[i], 1)
			}
		})
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("w=%d n=%d: index %d visited %d times", tc.w, tc.n, i, h)
			}
		}
	}
}

func TestTasksCoverEveryIndexOnceWithValidWorkers(t *testing.T) {
	for _, tc := range []struct{ w, n int }{{1, 7}, {4, 100}, {8, 3}, {0, 50}} {
		hits := make([]int32, tc.n)
		var bad atomic.Bool
		Tasks(tc.w, tc.n, func(worker, i int) {
			if worker < 0 || (tc.w > 0 && worker >= tc.w) {
				bad.Store(true)
			}
			atomic.AddInt32(&hits[i], 1)
		})
		if bad.Load() {
			t.Fatalf("w=%d n=%d: worker id out of range", tc.w, tc.n)
		}
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("w=%d n=%d: index %d visited %d times", tc.w, tc.n, i, h)
			}
		}
	}
}

func TestWorkersBelowThresholdIsOne(t *testing.T) {
	if Workers(10, 100) != 1 {
		t.Fatal("small work must stay on one goroutine")
	}
	if Workers(100, 100) < 1 {
		t.Fatal("large work needs at least one worker")
	}
}
