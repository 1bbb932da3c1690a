package train

import (
	"reflect"
	"testing"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// The defaults are the reference's, value for value: run configs,
// checkpoints and the frozen reference depend on them.
func TestDefaultConfigPinned(t *testing.T) {
	want := Config{
		Variant: "n", Epochs: 100, Batch: 16, Imgsz: 640, Device: "cpu",
		Optimizer: "auto", LR0: 0.01, LRF: 0.01, Momentum: 0.937, WeightDecay: 0.0005,
		WarmupEpochs: 3, WarmupMomentum: 0.8, WarmupBiasLR: 0.1, NBS: 64, ClipNorm: 10, EMATau: 2000,
		Mosaic: 1, CloseMosaic: 10, FlipLR: 0.5, HSVH: 0.015, HSVS: 0.7, HSVV: 0.4, Scale: 0.5, Translate: 0.1,
		Conf: 0.001, MaxDet: 300,
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig\n%+v\nwant\n%+v", got, want)
	}
}

// Every key of the config that names an augmentation setting has that
// setting's type, and Augment hands its value to the loader. The list of
// such keys is pinned so that a key never becomes a setting by accident.
func TestAugmentSettingsByKey(t *testing.T) {
	want := map[string]bool{"mosaic": true, "fliplr": true, "hsv_h": true, "hsv_s": true, "hsv_v": true, "scale": true, "translate": true}
	ct := reflect.TypeFor[Config]()
	for _, f := range augmentFields {
		if !want[f.Name] {
			t.Errorf("key %s is an augmentation setting this test does not expect", f.Name)
		}
		delete(want, f.Name)
		if ct.Field(f.index).Type.Kind() != f.Kind {
			t.Errorf("%s: %s, the setting is %s", f.Name, ct.Field(f.index).Type, f.Kind)
		}
	}
	if len(want) > 0 {
		t.Errorf("keys not matched to a setting: %v", want)
	}
	c := DefaultConfig()
	if a := c.Augment(); a != augment.DefaultConfig() {
		t.Errorf("default config's augmentation %+v, want augment.DefaultConfig", a)
	}
	c.Imgsz, c.Mosaic, c.FlipLR, c.HSVH, c.HSVS, c.HSVV, c.Scale, c.Translate = 96, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7
	w := augment.DefaultConfig()
	w.ImgSz, w.Mosaic, w.FlipLR, w.HSVH, w.HSVS, w.HSVV, w.Scale, w.Translate = 96, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7
	if a := c.Augment(); a != w {
		t.Errorf("Augment\n%+v\nwant\n%+v", a, w)
	}
}
