package train

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/metrics"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
)

// ValConfig configures Validate.
type ValConfig struct {
	Imgsz, Batch, Workers int
	Conf                  float32 // keep detections with score > Conf (0.001 in the reference)
	MaxDet                int     // 300
}

// Loader is the validation loader's configuration: the images
// letterboxed at Imgsz, in order, without augmentation, every
// ground-truth instance kept (no candidate rule, as Ultralytics
// validates). Square batches: the Go trainer does not take rect ones.
func (vc ValConfig) Loader() pipeline.Config {
	aug := defaultAug(vc.Imgsz)
	// Crowd regions are truth to ignore, as in COCOeval: detections on
	// them are neither true nor false positives.
	aug.KeepCrowd = true
	return pipeline.Config{BatchSize: vc.Batch, Workers: vc.Workers, Val: true, Augment: aug, Start: order.State{}}
}

// Validate scores m (eval mode) on data letterboxed at Imgsz with the grid
// metric: one-to-one outputs, top-k without NMS, score > Conf, masks =
// sigmoid(coefficients × prototypes) cropped to the box, threshold 0.5,
// compared on the prototype grid. Crowd regions are loaded as truth to
// ignore, as COCOeval does: a detection on one is neither a true nor a
// false positive. mask is nil only when no image produced mask predictions
// and the metric therefore has none (see metrics).
func Validate(ctx context.Context, m *model.Model, data Data, vc ValConfig) (box, mask *metrics.Result, err error) {
	return validate(ctx, data, vc, func(rec arrow.RecordBatch) ([][]model.Detection, [][]float32, error) {
		return predict.Infer(m, rec, vc.MaxDet)
	})
}

// inferFunc returns a batch's detections (score-sorted) and prototypes per
// image.
type inferFunc func(rec arrow.RecordBatch) (dets [][]model.Detection, protos [][]float32, err error)

// validate scores infer's output on data with the grid metric.
func validate(ctx context.Context, data Data, vc ValConfig, infer inferFunc) (box, mask *metrics.Result, err error) {
	ld, err := data.Open(ctx, vc.Loader())
	if err != nil {
		return nil, nil, err
	}
	defer ld.Close()
	em := metrics.NewEpochMetric(metrics.GridConfig{})
	var probs []float32
	var crowd []bool
	for {
		rec, err := ld.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		err = func() error {
			defer rec.Release()
			if batch.HasCanvas(rec.Schema()) {
				// The grid metric and the model take the whole canvas:
				// a live region (rect or multi_scale) would be scored
				// with its padding.
				return errors.New("train: validation batches with a live canvas (rect or multi_scale) are not supported: the Go trainer validates on square letterboxed batches")
			}
			dets, protos, err := infer(rec)
			if err != nil {
				return err
			}
			info, err := predict.ReadImageInfo(rec)
			if err != nil {
				return err
			}
			tg, err := batch.InstancesOf(rec)
			if err != nil {
				return err
			}
			off := 0
			for i, inf := range info {
				n := tg.BoxesPerImage[i]
				cells := inf.Hp * inf.Wp
				d := predict.Filter(dets[i], vc.Conf)
				probs = predict.GridMasks(probs, d, protos[i], inf.Hp, inf.Wp, inf.Stride)
				gi := &metrics.GridImage{Affine: inf.Transform, GridH: inf.Hp, GridW: inf.Wp,
					Truth: metrics.GridTruth{Boxes: tg.Boxes[4*off : 4*(off+n)], Classes: tg.Classes[off : off+n],
						Masks: tg.Masks[off*cells : (off+n)*cells], IsCrowd: crowdFlags(tg.IsCrowd[off:off+n], &crowd)},
					Pred: metrics.GridPredictions{MaskProbs: probs}}
				for _, x := range d {
					gi.Pred.Boxes = append(gi.Pred.Boxes, x.Box[:]...)
					gi.Pred.Classes = append(gi.Pred.Classes, int32(x.Class))
					gi.Pred.Scores = append(gi.Pred.Scores, x.Score)
				}
				if err := em.Add(gi); err != nil {
					return fmt.Errorf("image %d: %w", inf.ID, err)
				}
				off += n
			}
			return nil
		}()
		if err != nil {
			return nil, nil, err
		}
	}
	box, mask = em.Result()
	return box, mask, nil
}

func (t *trainer) validate(ctx context.Context) (box, mask *metrics.Result, err error) {
	if err := t.loadEMA(); err != nil {
		return nil, nil, err
	}
	data := t.opt.Val
	if data == nil {
		data = t.opt.Train
	}
	return Validate(ctx, t.em, data, t.cfg.ValConfig())
}

// loadEMA readies the evaluation model: its state tensors are the EMA's
// average already (see setup), so only the BatchNorm counters, which are
// not averaged, are copied.
func (t *trainer) loadEMA() error {
	src := t.m.BatchNorms()
	for i, bn := range t.em.BatchNorms() {
		bn.BN.NumBatchesTracked = src[i].BN.NumBatchesTracked
	}
	return nil
}

// crowdFlags converts the batch's {0,1} flags into dst's storage.
func crowdFlags(v []uint8, dst *[]bool) []bool {
	*dst = (*dst)[:0]
	for _, x := range v {
		*dst = append(*dst, x != 0)
	}
	return *dst
}
