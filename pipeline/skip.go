package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// Skip reasons a Source reports for rows it cannot deliver (Damage). The
// loader counts a skipped sample under its reason, and a skipped mosaic
// partner under "partner_" + reason; the loader's own reasons are "decode"
// (the image bytes do not decode) and "bad_rle" (a crowd mask that does
// not rasterise). They appear in Stats.Skipped and in skipped.json; never
// rename one.
const (
	SkipBadShard      = "bad_shard"      // the shard file cannot be opened (truncated, bad footer)
	SkipBadRowGroup   = "bad_row_group"  // a row group (Parquet pages) fails to read or decompress
	SkipImageChecksum = "image_checksum" // the image bytes fail their crc32c
	SkipBadRow        = "bad_row"        // a row's columns are inconsistent, or it has no image bytes
)

// BadRow is one row of a block that its Source cannot deliver.
type BadRow struct {
	Row    int    // index within the block
	Reason string // a Skip* constant
	Err    error
}

// Damage is the error a Source's ReadBlock returns together with the
// block's full-length rows when some of them are unusable: the loader skips
// exactly those rows, counting each by reason, and goes on (with
// Config.Strict it fails instead). Any other ReadBlock error fails the
// stream.
type Damage struct {
	Where string // e.g. "shard part-00003.parquet row group 2 (rows 200-299)"
	Rows  []BadRow
}

// Error says where, then what.
func (d *Damage) Error() string {
	if len(d.Rows) == 0 {
		return d.Where + ": no damage"
	}
	return fmt.Sprintf("%s: %d unusable rows (%s: %v)", d.Where, len(d.Rows), d.Rows[0].Reason, d.Rows[0].Err)
}

// SkipSummaryName is the file WriteSkipSummary writes into a run directory.
const SkipSummaryName = "skipped.json"

// SkipSummary is what a command prints and stores at the end of a run: the
// samples skipped by reason (Stats.Skipped) out of those attempted.
type SkipSummary struct {
	Images  int64            `json:"images"`  // samples delivered in batches
	Skipped map[string]int64 `json:"skipped"` // by reason; empty when nothing was skipped
}

// Summary returns the skip summary of s.
func (s Stats) Summary() SkipSummary {
	m := maps.Clone(s.Skipped)
	if m == nil {
		m = map[string]int64{}
	}
	return SkipSummary{Images: s.Images, Skipped: m}
}

// Total is the number of skips of every reason.
func (s SkipSummary) Total() int64 {
	var t int64
	for _, n := range s.Skipped {
		t += n
	}
	return t
}

// String is one line: "skipped: nothing" or "skipped 3: bad_row_group=2
// image_checksum=1", reasons sorted.
func (s SkipSummary) String() string {
	if len(s.Skipped) == 0 {
		return "skipped: nothing"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.Skipped)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, s.Skipped[k]))
	}
	return fmt.Sprintf("skipped %d: %s", s.Total(), strings.Join(parts, " "))
}

// Print writes the summary line to w.
func (s SkipSummary) Print(w io.Writer) error {
	_, err := fmt.Fprintln(w, s.String())
	return err
}

// WriteFile stores the summary as JSON in dir/skipped.json (atomically), so
// that a user finds it after the run.
func (s SkipSummary) WriteFile(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, SkipSummaryName), append(b, '\n'), 0o644)
}

// LogPerReason is how many skips of one reason a loader logs at Warn; the
// rest go to Debug (a damaged row group is hundreds of skips an epoch).
const LogPerReason = 10

func (l *Loader) skip(j *job, s *sample, row int64, id int64, reason string, err error) {
	l.skipMu.Lock()
	l.skipped[reason]++
	n := l.skipped[reason]
	l.skipMu.Unlock()
	if l.cfg.Strict {
		// The run fails here: say so, not "skipping".
		l.fail(fmt.Errorf("pipeline: row %d image %d: %s: %w", row, id, reason, err))
		return
	}
	level := slog.LevelWarn
	if n > LogPerReason {
		level = slog.LevelDebug
	}
	l.cfg.Logger.Log(context.Background(), level, "skipping sample", "row", row, "image_id", id, "epoch", j.epoch, "reason", reason, "err", err)
}
