package cputime

import "testing"

func TestProcessGrowsWithWork(t *testing.T) {
	d0, ok := Process()
	if !ok {
		t.Skip("no process CPU time on this platform")
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x ^= i * i
	}
	d1, _ := Process()
	if d1 <= d0 {
		t.Fatalf("CPU time did not grow over a busy loop: %v → %v (x=%d)", d0, d1, x)
	}
	if Seconds() < d1.Seconds() {
		t.Fatal("Seconds went backwards")
	}
}
