// Package pipeline streams training batches from shards: read → order →
// decode → augment → rasterise → collate, in worker goroutines, into Arrow
// records of the formats/batch schema.
//
// # Use
//
//	src, err := pipeline.OpenShards(dir)
//	l, err := pipeline.New(ctx, src, pipeline.Config{BatchSize: 32, Start: order.State{Seed: 1}, Epochs: 300, CloseMosaic: 10})
//	defer l.Close()
//	for rec, err := range l.All(ctx) {
//		if err != nil { ... }
//		train(rec)    // batch.ImageTensor(rec), batch.MaskStack(rec), ...
//		rec.Release() // the consumer owns every record it receives
//		save(l.State())
//	}
//
// Batches (Next, State, Close) is the transport-neutral interface; a remote
// client implements the same.
//
// # Determinism and resume
//
// The sample at epoch position p is built from a generator seeded by
// (seed, epoch, p) (order.Reseed with order.StreamSample) and from mosaic
// partners that are a function of (seed, epoch, p) (order.Epoch.Partners,
// drawn from p's shuffle window — the window, not the whole dataset, keeps
// I/O bounded and decodes per output image near 1; windows are uniform
// draws of blocks from the whole dataset). Output bytes are therefore the
// same for any worker count, scheduling, world size or restart. State()
// after a batch, given back as Config.Start, continues with exactly the next
// batch. Changing WorldSize at a restart keeps the union of samples; see
// package order for the rank split.
//
// # Workers and memory
//
// One dispatcher walks this rank's positions and hands one task per sample
// to Workers goroutines; at most Prefetch batches are in flight (the
// dispatcher blocks when the consumer falls behind). A worker decodes the
// sample's images through a byte-bounded LRU cache of decoded images
// (CacheBytes; concurrent requests for one image share one decode), plans
// the augmentation, renders the pixels straight into the batch's image
// buffer and transforms the polygons. When a batch's last sample is done,
// its sum_N is known: one mask buffer of sum_N·Hp·Wp bytes is allocated and
// each image's rasterisation is queued; workers take those first and write
// every instance's mask straight into its slice of that buffer. The record
// wraps the buffers without copying. Batches leave in order.
//
// Buffers come from a pooled memory.Allocator: when the consumer releases a
// record its buffers return to the pool and the next batches reuse them.
// Loaders over the same source can share one decoded-image cache
// (Config.ImageCache; a server does so for the streams of one shard set).
//
// Config.Memory estimates a loader's memory from its settings alone
// (batches in flight × batch × (3·imgsz² + masks), plus the cache); New
// refuses a configuration over Config.MaxMemory (default half the machine's
// or container's memory) with ErrMemoryLimit before allocating anything.
//
// # JPEG
//
// The default build is pure Go (CGO_ENABLED=0 works): baseline JPEGs, what
// datasets hold, are decoded by pipeline/jpeg straight into the cache's
// pooled buffers, with exactly image/jpeg's pixels in about a third of its
// CPU time (BENCHMARKS.md);
// anything else (progressive, CMYK, damaged) by the standard library's
// image/jpeg. Built with -tags turbojpeg (cgo, Debian package
// libturbojpeg0-dev), JPEGs are decoded by libjpeg-turbo straight into the
// cache's pooled buffers: faster still and allocation-free. The two
// decoders differ by a few levels per pixel (different IDCT and chroma
// upsampling), so batches are bit-identical across runs of one build, not
// across the two builds. JPEGDecoder names the one compiled in.
//
// # Pre-decoded rows
//
// Rows of pre-decoded shards (shard.FormatRaw, shard.FormatZstd; convert
// --pixels) are copied or inflated into the cache's pooled buffers, with no
// allocation per image (one shared zstd decoder runs a block decoder per
// concurrent call). A row shrunk at conversion (--max-side) is augmented in
// its stored frame; the batch reports its source size as orig_width and
// orig_height and a transform from source pixels to the canvas
// (sourceFrame), so predictions map to the source image as for any row.
// Frames that do not inflate to width×height×3 bytes are skipped as decode
// failures.
//
// # Bad data
//
// Damage is contained to what is damaged. A Source reports rows it cannot
// deliver with a *Damage error beside the block's rows; ShardSource does so
// for a shard that cannot be opened (bad_shard: truncated, bad footer), a
// row group whose pages fail to read or decompress (bad_row_group), a row
// whose image bytes fail their crc32c (image_checksum, format version 2)
// and a row with inconsistent columns (bad_row), logging the shard and row
// range once. The loader skips such samples, and images that fail to
// decode (decode), counting each by reason in Stats().Skipped (a failed
// mosaic partner counts as "partner_" + reason and leaves its quarter
// filled) and logging the first shard.LogPerReason of each reason at Warn (keys
// row, image_id when known, epoch, reason, err). A skipped sample shortens
// its batch; a batch that loses every sample is never returned (Next goes
// on to the next batch, counted in Stats.Emptied), and an epoch of the run
// that delivers no sample at all fails the stream with the skip counts and
// the first causes, which name their shards. A missing shard file is
// skipped like a 0-byte one or a directory in its place (bad_shard); a set
// with no rows at all fails OpenShards and New with ErrEmptySet.
//
// Bounds come before allocation. Before any pixel buffer exists an image's
// size is read from its header (formats/imagehdr; a pre-decoded row's from
// its width and height) and refused, counted as image_too_large, over
// Config.MaxImagePixels (default imagehdr.MaxPixels) or, under a memory
// budget, when its decode (imagehdr.DecodeBytes) needs more than
// EstimateImageBytes plus half the headroom H. H is MaxMemory minus the
// Budget of the estimate of the same settings with one worker and at most
// two batches ahead, so that it does not change with the worker count and
// batches stay identical at any; decodes larger than the estimate assumes
// wait for one another within H/2 rather than add up. A row with more
// than shard.MaxInstances instances is skipped whole (too_many_instances)
// before any label work. Under a budget a batch's masks, boxes and classes
// are bounded by the estimate's share (8 instances an image) plus the
// other half of H split between the batches that can be in flight at once
// (the default prefetch's or the configured one's, whichever is more):
// when a batch would exceed it, the samples with the most instances are
// left out first (mask_budget). An instance whose class index lies
// outside the source's categories (a ShardSource's manifest) is left out
// of its delivered sample and counted per instance (bad_class), like a
// crowd mask that does not rasterise (bad_rle). Stats.Summary is the
// end-of-run summary every command prints and writes into its run
// directory (skipped.json). With Config.Strict the first such problem
// fails the stream instead. Any other source error fails the
// stream. No case stalls: every wait, the collate wait included, also
// watches the context.
package pipeline
