package bufpool

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

var _ memory.Allocator = (*Pool)(nil)

func TestReuseBySizeClass(t *testing.T) {
	p := New(1 << 20)
	a := p.Allocate(1000)
	if len(a) != 1000 || cap(a) != 1024 {
		t.Fatalf("len %d cap %d, want 1000/1024", len(a), cap(a))
	}
	a[0] = 7
	p.Free(a)
	b := p.Allocate(600) // same class (513..1024)
	if &b[0] != &a[0] {
		t.Fatal("a freed buffer of the same class was not reused")
	}
	if b[0] != 7 {
		t.Fatal("reused buffers are documented as not zeroed")
	}
	if allocs, reuses := p.Counts(); allocs != 1 || reuses != 1 {
		t.Fatalf("counts %d/%d, want 1/1", allocs, reuses)
	}
	c := p.Allocate(600) // free list empty again
	if &c[0] == &a[0] {
		t.Fatal("one buffer handed out twice")
	}
}

func TestRetentionCapAndForeignBuffers(t *testing.T) {
	p := New(1024)
	x, y := p.Allocate(1024), p.Allocate(1024)
	p.Free(x)
	p.Free(y) // over the cap: dropped
	p.Free(make([]byte, 100))
	if a := p.Allocate(1024); &a[0] != &x[0] {
		t.Fatal("the buffer within the cap was not kept")
	}
	if a := p.Allocate(1024); &a[0] == &y[0] {
		t.Fatal("a buffer beyond the retention cap was kept")
	}
	if a := p.Allocate(100); cap(a) != 128 {
		t.Fatalf("foreign buffer entered the pool: cap %d", cap(a))
	}
}

func TestReallocateKeepsContents(t *testing.T) {
	p := New(1 << 20)
	a := p.Allocate(10)
	copy(a, "0123456789")
	b := p.Reallocate(100, a)
	if string(b[:10]) != "0123456789" || len(b) != 100 {
		t.Fatalf("reallocate lost contents: %q", b[:10])
	}
	if c := p.Reallocate(50, b); &c[0] != &b[0] {
		t.Fatal("shrinking reallocated")
	}
}
