package train

import (
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/model"
)

// HostMemory estimates the host memory the model of a run holds while it
// trains on d, beside its loaders (model.TrainingBytes): on a device
// whose kernels run on the host (cpu, emu) the weights with their
// gradients and optimiser state and a batch's activations; on a device
// (cuda) these live in device memory and the host keeps two fp32 copies
// of the weights (the EMA and a checkpoint being written). classes is the
// run's class count (Config.Classes, or the shard set's).
func HostMemory(cfg Config, d *device.Device, classes int) (int64, error) {
	m, err := model.Describe(model.Config{Variant: cfg.Variant, Classes: classes})
	if err != nil {
		return 0, err
	}
	if !d.Host {
		return 8 * m.NumParams(), nil
	}
	return m.TrainingBytes(cfg.Batch, cfg.Imgsz)
}

// TrainLoader is the training loader's configuration of a run from
// start: what Run opens, and what a caller judges a memory budget by
// before the run starts.
func (c Config) TrainLoader(start order.State) pipeline.Config {
	return pipeline.Config{BatchSize: c.Batch, Workers: c.Workers, Start: start, Epochs: c.Epochs,
		CloseMosaic: c.CloseMosaic, Augment: c.Augment()}
}

// ValConfig is the validation of a run, each epoch's (ValConfig.Loader
// is its loader).
func (c Config) ValConfig() ValConfig {
	return ValConfig{Imgsz: c.Imgsz, Batch: c.Batch, Workers: c.Workers, Conf: float32(c.Conf), MaxDet: c.MaxDet}
}
