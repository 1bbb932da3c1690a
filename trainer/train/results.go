package train

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

var resultsHeader = []string{"epoch", "train/box_loss", "train/seg_loss", "train/cls_loss", "train/dfl_loss", "train/sem_loss",
	"metrics/mAP50(B)", "metrics/mAP50-95(B)", "metrics/mAP50(M)", "metrics/mAP50-95(M)",
	"lr", "o2m_weight", "images_per_s", "loader_stall_s", "train_s", "val_s"}

func (e Epoch) row() []float64 {
	return []float64{float64(e.Epoch), e.Loss[0], e.Loss[1], e.Loss[2], e.Loss[3], e.Loss[4],
		e.BoxMAP50, e.BoxMAP, e.MaskMAP50, e.MaskMAP, e.LR, e.O2M, e.ImagesPerSec, e.StallSec, e.TrainSec, e.ValSec}
}

func writeResults(path string, hist []Epoch) error {
	var b bytes.Buffer
	for i, h := range resultsHeader {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(h)
	}
	b.WriteByte('\n')
	for _, e := range hist {
		for i, v := range e.row() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatFloat(v, 'g', 7, 64))
		}
		b.WriteByte('\n')
	}
	if err := atomicfile.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}
