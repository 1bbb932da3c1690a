package remote

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestArenaChunksTakeTurns streams equal messages through the arena the way
// gRPC reads them (16 KiB frames, a short last one) while the consumer is
// sometimes behind (it still holds a message when the next one starts) and
// sometimes caught up (everything released). Two chunks must serve the
// whole stream: each fresh chunk is page faults on every byte (at b32@640 a
// quarter of a gigabyte).
func TestArenaChunksTakeTurns(t *testing.T) {
	const msg = 3<<20 + 5000 // not a multiple of a frame: every message ends in a short one
	for _, tc := range []struct {
		name   string
		behind func(i int) bool // whether message i is still held when i+1 starts
	}{
		{"always behind", func(int) bool { return true }},
		{"never behind", func(int) bool { return false }},
		{"behind one in three", func(i int) bool { return i%3 == 0 }},
		{"behind two in three", func(i int) bool { return i%3 != 0 }},
		{"behind in runs", func(i int) bool { return i/7%2 == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backing := memory.NewCheckedAllocator(memory.NewGoAllocator())
			p := newArenaPool(backing)
			var held []*[]byte // the previous message's frames, while behind
			for i := range 400 {
				var frames []*[]byte
				for n := msg; n > 0; n -= maxFrame {
					frames = append(frames, p.Get(min(n, maxFrame)))
				}
				p.noteMessage(msg)
				for _, b := range held {
					p.Put(b)
				}
				held = nil
				if tc.behind(i) {
					held = frames
				} else {
					for _, b := range frames {
						p.Put(b)
					}
				}
			}
			// 400 messages fill a chunk about 30 times over.
			if n := p.made.Load(); n > 2 {
				t.Errorf("%d chunks made for 400 messages of %d bytes, want at most 2 (they take turns)", n, msg)
			}
			// Every chunk goes back to the backing allocator: at close the
			// idle ones, after it each with its last frame.
			p.close()
			if len(held) > 0 && backing.CurrentAlloc() == 0 {
				t.Error("the chunk of frames still held was freed at close")
			}
			for _, b := range held {
				p.Put(b)
			}
			if n := backing.CurrentAlloc(); n != 0 {
				t.Errorf("%d bytes of chunks not given back after close", n)
			}
		})
	}
}
