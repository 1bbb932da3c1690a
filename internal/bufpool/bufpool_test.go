package bufpool

import (
	"testing"
	"unsafe"

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

// spareCap is a backing allocator that hands out more capacity than asked
// for, as an allocator may; the pool must still free exactly what it
// asked for (spareCap's Free finds its own allocation from that).
type spareCap struct{ memory.Allocator }

func (s spareCap) Allocate(n int) []byte { return s.Allocator.Allocate(2 * n)[:n] }
func (s spareCap) Free(b []byte) {
	if len(b) != cap(b) {
		panic("bufpool freed a buffer with spare capacity: not the slice it asked for")
	}
	s.Allocator.Free(unsafe.Slice(&b[0], 2*len(b)))
}

func TestBackingAllocatorGetsEveryBufferBack(t *testing.T) {
	tests := []struct {
		name string
		// run allocates and frees through p; it returns the bytes it
		// still holds from the pool (freed after Close by the test).
		run  func(t *testing.T, p *Pool) [][]byte
		held int // bytes outstanding at the backing allocator before Close
	}{
		{"within the cap: retained until Close", func(t *testing.T, p *Pool) [][]byte {
			p.Free(p.Allocate(1000))
			return nil
		}, 1024},
		{"beyond the cap: freed at once", func(t *testing.T, p *Pool) [][]byte {
			a, b, c := p.Allocate(1000), p.Allocate(1000), p.Allocate(1000)
			p.Free(a)
			p.Free(b)
			p.Free(c) // the cap (2048) is full
			return nil
		}, 2048},
		{"reused, not allocated again", func(t *testing.T, p *Pool) [][]byte {
			for i := 0; i < 10; i++ {
				p.Free(p.Allocate(700))
			}
			if allocs, _ := p.Counts(); allocs != 1 {
				t.Errorf("%d backing allocations for one buffer reused 10 times", allocs)
			}
			return nil
		}, 1024},
		{"reallocate frees the smaller class", func(t *testing.T, p *Pool) [][]byte {
			b := p.Allocate(100)
			b = p.Reallocate(3000, b) // 128 retained, 4096 held by the test
			return [][]byte{b}
		}, 4096 + 128},
		{"held across Close: freed after it, not retained", func(t *testing.T, p *Pool) [][]byte {
			return [][]byte{p.Allocate(64), p.Allocate(5000)}
		}, 64 + 8192},
	}
	for _, tc := range tests {
		for _, backing := range []struct {
			name string
			mem  func(memory.Allocator) memory.Allocator
		}{
			{"exact", func(a memory.Allocator) memory.Allocator { return a }},
			{"spare capacity", func(a memory.Allocator) memory.Allocator { return spareCap{a} }},
		} {
			t.Run(tc.name+"/"+backing.name, func(t *testing.T) {
				checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
				p := NewOn(backing.mem(checked), 2048)
				held := tc.run(t, p)
				if want := tc.held * map[string]int{"exact": 1, "spare capacity": 2}[backing.name]; checked.CurrentAlloc() != want {
					t.Errorf("before Close: %d bytes outstanding, want %d", checked.CurrentAlloc(), want)
				}
				p.Close()
				p.Close()
				for _, b := range held {
					p.Free(b)
				}
				checked.AssertSize(t, 0)
			})
		}
	}
}

func TestCloseOnTheGoHeapStopsRetaining(t *testing.T) {
	p := New(1 << 20)
	a := p.Allocate(1000)
	p.Free(a)
	p.Close()
	if b := p.Allocate(1000); &b[0] == &a[0] {
		t.Fatal("a buffer retained before Close was reused after it")
	}
	b := p.Allocate(1000)
	p.Free(b)
	if c := p.Allocate(1000); &c[0] == &b[0] {
		t.Fatal("a buffer freed after Close was retained")
	}
}
