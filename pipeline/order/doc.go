// Package order computes segpipe's per-epoch sample order, the split of that
// order among ranks, and the per-sample random streams. Everything here is
// a pure function of integers: (seed, epoch, block sizes) → order, and
// (seed, epoch, position) → random stream. That is what makes a run
// reproducible under any worker count, resumable from a few integers and
// elastic in the number of ranks.
//
// # Order: block shuffle + window shuffle
//
// A dataset is a sequence of blocks (Parquet row groups) that are read
// whole. For epoch e:
//
//  1. the blocks are permuted (Fisher–Yates, stream (seed, e));
//  2. consecutive permuted blocks are grouped into windows of at least
//     WindowRows rows (the last window may be smaller);
//  3. the rows of each window are permuted (stream (seed, e, window)).
//
// The epoch order is the concatenation of the windows. Position p of the
// epoch is a global index; its row is [Epoch.Row].
//
// Trade-off: reading is sequential within a block and needs one window of
// encoded rows in memory (two while the next is prefetched), so I/O is
// bounded by the window, not the dataset. The price is shuffle quality:
// two rows of the same block land in the same window, so within an epoch a
// row's neighbours are drawn from WindowRows/blockRows random blocks rather
// than from the whole dataset. With blocks much smaller than the window (the
// default window is 512 rows; converted shards use row groups of tens to
// hundreds of rows) each window mixes many blocks from anywhere in the
// dataset, and the block permutation changes every epoch.
//
// # Ranks
//
// With world size W, from a start position S (the global samples already
// consumed), rank r takes positions S+r, S+r+W, S+r+2W, … below the epoch
// length, in that order, and groups them into batches. For any W the ranks
// are disjoint and their union is [S, N): every sample of the epoch exactly
// once. Ranks' counts differ by at most one; a rank's last batch of an epoch
// may be short.
//
// # Resume
//
// A [State] is (seed, epoch, consumed): consumed counts global positions
// whose samples all ranks have taken. After rank-local step k of a run that
// started at S with W ranks and batch B, consumed = S + k·B·W (capped at N).
// Because augmentation draws depend only on (seed, epoch, position), a
// restart from a state yields exactly the samples — bytes included — that
// the uninterrupted run produces from there; with the same W they also come
// in the same batches.
package order
