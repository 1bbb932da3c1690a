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

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/atomicfile"
)

// Skip reasons a Source reports for rows it cannot deliver (Damage). The
// loader counts a skipped sample under its reason, and a skipped mosaic
// partner under PartnerPrefix + reason (the sample is delivered with that
// quarter filled); the loader's own reasons are "decode"
// (the image bytes do not decode), imagehdr.ReasonTooLarge,
// shard.ReasonTooManyInstances, SkipMaskBudget, and, counted per
// instance of a delivered sample, "bad_rle" (a crowd mask that does not
// rasterise) and SkipBadClass. They appear in Stats.Skipped and in skipped.json; never
// rename one.
const (
	SkipBadShard      = "bad_shard"      // the shard file cannot be opened (truncated, bad footer)
	SkipBadRowGroup   = "bad_row_group"  // a row group (Parquet pages) fails to read or decompress
	SkipImageChecksum = "image_checksum" // the image bytes fail their crc32c
	SkipBadRow        = "bad_row"        // a row's columns are inconsistent, or it has no image bytes
)

// PartnerPrefix starts the reason of a mosaic partner that was skipped:
// its quarter of the sample is filled, the sample itself is delivered.
const PartnerPrefix = "partner_"

// BadRow is one row of a block that its Source cannot deliver.
type BadRow struct {
	Row    int    // index within the block
	Reason string // a Skip* constant
	Err    error
	// ImageID is the row's image id when HasImageID: damage can leave a
	// row's id unread (a whole row group, a shard), and 0 is an id.
	ImageID    int64
	HasImageID bool
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
// samples skipped by reason (Stats.Skipped) out of those attempted. A
// reason with PartnerPrefix counts filled mosaic quarters, not samples:
// Samples and Quarters keep the two apart.
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

// Total is the number of skips of every reason: Samples + Quarters.
func (s SkipSummary) Total() int64 { return s.Samples() + s.Quarters() }

// Samples is the number of samples skipped (not delivered).
func (s SkipSummary) Samples() int64 { return s.count(false) }

// Quarters is the number of mosaic quarters filled for a skipped partner
// (their samples were delivered).
func (s SkipSummary) Quarters() int64 { return s.count(true) }

func (s SkipSummary) count(partner bool) int64 {
	var t int64
	for k, n := range s.Skipped {
		if strings.HasPrefix(k, PartnerPrefix) == partner {
			t += n
		}
	}
	return t
}

// MarshalJSON writes the summary with its two totals, samples_skipped and
// quarters_filled, beside the counts by reason.
func (s SkipSummary) MarshalJSON() ([]byte, error) {
	type plain SkipSummary
	if s.Skipped == nil {
		s.Skipped = map[string]int64{}
	}
	return json.Marshal(struct {
		plain
		Samples  int64 `json:"samples_skipped"`
		Quarters int64 `json:"quarters_filled"`
	}{plain(s), s.Samples(), s.Quarters()})
}

// String is one line: "skipped: nothing", or "skipped 3 samples:
// bad_row_group=2 image_checksum=1" followed, when partners were skipped,
// by "; filled 2 mosaic quarters: partner_decode=2"; reasons sorted.
func (s SkipSummary) String() string {
	if s.Total() == 0 {
		return "skipped: nothing"
	}
	var own, partner []string
	for _, k := range slices.Sorted(maps.Keys(s.Skipped)) {
		if s.Skipped[k] == 0 {
			continue
		}
		part := fmt.Sprintf("%s=%d", k, s.Skipped[k])
		if strings.HasPrefix(k, PartnerPrefix) {
			partner = append(partner, part)
		} else {
			own = append(own, part)
		}
	}
	noun := "samples"
	if s.Samples() == 1 {
		noun = "sample"
	}
	line := fmt.Sprintf("skipped %d %s", s.Samples(), noun)
	if len(own) > 0 {
		line += ": " + strings.Join(own, " ")
	}
	if len(partner) > 0 {
		line += fmt.Sprintf("; filled %d mosaic quarters: %s", s.Quarters(), strings.Join(partner, " "))
	}
	return line
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

// skip counts and logs a sample (or a mosaic partner) that cannot be used.
// id is the row's image id when known is true; otherwise the message and
// the log line leave it out rather than give 0.
func (l *Loader) skip(j *job, row int64, id int64, known bool, reason string, err error) {
	l.skipMu.Lock()
	l.skipped[reason]++
	n := l.skipped[reason]
	if msg := err.Error(); len(l.causes) < 3 && !slices.Contains(l.causes, msg) {
		l.causes = append(l.causes, msg)
	}
	l.skipMu.Unlock()
	where := fmt.Sprintf("row %d", row)
	if known {
		where += fmt.Sprintf(" image %d", id)
	}
	if l.cfg.Strict {
		// The run fails here: say so, not "skipping".
		l.fail(fmt.Errorf("pipeline: %s: %s: %w", where, reason, err))
		return
	}
	// A damaged row group is hundreds of skips an epoch: past the first
	// few of a reason, the rest go to Debug.
	level := slog.LevelWarn
	if n > shard.LogPerReason {
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{slog.Int64("row", row)}
	if known {
		attrs = append(attrs, slog.Int64("image_id", id))
	}
	attrs = append(attrs, slog.Int("epoch", j.epoch), slog.String("reason", reason), slog.Any("err", err))
	l.cfg.Logger.LogAttrs(context.Background(), level, "skipping sample", attrs...)
}
