// Package arena stores a whole dataset's annotations compactly and emits
// them as shard.Image rows with the image files read in parallel.
//
// Coordinates of every ring live in one []float32, ring boundaries in one
// []uint32 and RLE counts in one []uint32, so a COCO-scale dataset (860k
// annotations) costs a few large allocations rather than millions of small ones. Readers
// append while parsing and roll back what they skip with Mark/Rollback.
//
// Emission (Source.Each) reads image files with a pool of goroutines a
// bounded distance ahead (twice the worker count) and hands rows to the
// caller strictly in order; each row's buffers come from a sync.Pool and
// return to it when the callback returns, so the steady state allocates
// one small channel per image and nothing per instance.
package arena
