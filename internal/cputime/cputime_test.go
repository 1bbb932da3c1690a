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

func TestMeterReportsWork(t *testing.T) {
	if _, ok := Process(); !ok {
		t.Skip("no process CPU time on this platform")
	}
	var got float64
	done := Meter(func(s float64) { got = s })
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x ^= i * i
	}
	done()
	if !(got > 0) {
		t.Fatalf("Meter reported %v s over a busy loop (x=%d)", got, x)
	}
}
