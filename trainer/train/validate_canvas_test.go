package train

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/model"
)

// rectData streams rect batches whatever it is asked for, as a remote
// source configured elsewhere could.
type rectData struct{ Data }

func (d rectData) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	cfg.Rect = true
	return d.Data.Open(ctx, cfg)
}

// TestValidateRefusesLiveCanvasBatches: the Go trainer scores whole
// canvases, so a rect (or multi_scale) stream is refused by name rather
// than scored with its padding.
func TestValidateRefusesLiveCanvasBatches(t *testing.T) {
	vc := ValConfig{Imgsz: 64, Batch: 4, Workers: 1, Conf: 0.001, MaxDet: 300}
	called := false
	infer := func(rec arrow.RecordBatch) ([][]model.Detection, [][]float32, error) {
		called = true
		return nil, nil, nil
	}
	src := &pipeline.SliceSource{Rows: crowdRows(t, 2)}
	_, _, err := validate(context.Background(), rectData{Local(src)}, vc, infer)
	if err == nil || !strings.Contains(err.Error(), "rect or multi_scale") || called {
		t.Fatalf("err %v, inferred %v: want a refusal before inference", err, called)
	}
	if _, _, err := validate(context.Background(), Local(src), vc, func(rec arrow.RecordBatch) ([][]model.Detection, [][]float32, error) {
		n := int(rec.NumRows())
		return make([][]model.Detection, n), make([][]float32, n), nil
	}); err != nil {
		t.Fatalf("square batches: %v", err)
	}
}
