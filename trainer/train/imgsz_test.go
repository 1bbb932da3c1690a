package train

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Config files and run directories written before the augmentation
// settings became an embedded table key the size "imgsz": they load, the
// size is the run's Imgsz and the loader gets it, and the embedded
// augment ImgSz stays zero.
func TestOldConfigImgszLoads(t *testing.T) {
	// A config file (trainer/configs/smoke.json) and a run's config.json as
	// the first training loop wrote it: the settings flat, no copy_paste.
	const configFile = `{"variant": "n", "epochs": 3, "batch": 8, "imgsz": 128, "seed": 0,
  "optimizer": "auto", "close_mosaic": 1, "val_every": 0}`
	const runConfig = `{
  "shards": "/data/train",
  "variant": "s", "classes": 2, "epochs": 5, "batch": 4, "imgsz": 320, "device": "cpu", "seed": 7, "workers": 1,
  "optimizer": "sgd", "lr0": 0.01, "lrf": 0.01, "momentum": 0.937, "weight_decay": 0.0005,
  "warmup_epochs": 3, "warmup_momentum": 0.8, "warmup_bias_lr": 0.1, "nbs": 64, "clip_norm": 10, "ema_tau": 2000,
  "mosaic": 0.5, "close_mosaic": 10, "fliplr": 0.5, "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4,
  "scale": 0.5, "translate": 0.1, "conf": 0.001, "max_det": 300, "val_every": 0,
  "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
}
`
	for _, tc := range []struct {
		name, text string
		imgsz      int
		load       func(dir, path string) (Config, error)
	}{
		{"config file", configFile, 128, func(_, path string) (Config, error) {
			c := DefaultConfig()
			return c, c.LoadConfig(path)
		}},
		{"run config as a config file", runConfig, 320, func(_, path string) (Config, error) {
			c := DefaultConfig()
			err := c.LoadConfig(path)
			return c, err
		}},
		{"resumed run directory", runConfig, 320, func(dir, _ string) (Config, error) {
			rm, err := readRunMeta(dir)
			return rm.Config, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, ConfigFile)
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := tc.load(dir, path)
			if err != nil {
				t.Fatal(err)
			}
			if c.Imgsz != tc.imgsz || c.Augment().ImgSz != tc.imgsz || c.Config.ImgSz != 0 {
				t.Errorf("Imgsz %d, Augment().ImgSz %d, embedded ImgSz %d; want %d, %d, 0",
					c.Imgsz, c.Augment().ImgSz, c.Config.ImgSz, tc.imgsz, tc.imgsz)
			}
			if err := c.validateSettings(); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
}

// "imgsz" is one key, one flag and one JSON member, whichever way it is
// set, and it reaches the loader.
func TestImgszIsOneKey(t *testing.T) {
	if n := len(slices.DeleteFunc(Keys(), func(k string) bool { return k != "imgsz" })); n != 1 {
		t.Fatalf("Keys() lists imgsz %d times", n)
	}
	c := DefaultConfig()
	if err := c.Set("imgsz", "320"); err != nil {
		t.Fatal(err)
	}
	if c.Imgsz != 320 || c.Augment().ImgSz != 320 || c.Config.ImgSz != 0 {
		t.Errorf("Set imgsz 320: Imgsz %d, Augment().ImgSz %d, embedded %d", c.Imgsz, c.Augment().ImgSz, c.Config.ImgSz)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte(`"imgsz":`)); n != 1 || !bytes.Contains(b, []byte(`"batch":16,"imgsz":320,`)) {
		t.Errorf("JSON has imgsz %d times, want once after batch: %s", n, b)
	}
}

// The embedded augment ImgSz is not a second size: set beside Imgsz to
// anything else, the config is refused rather than one of the two
// silently winning.
func TestEmbeddedImgSzIsNotASecondSize(t *testing.T) {
	for _, tc := range []struct {
		embedded int
		ok       bool
	}{{0, true}, {640, true}, {320, false}} {
		c := DefaultConfig()
		c.Config.ImgSz = tc.embedded
		err := c.validateSettings()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "imgsz 640")) {
			t.Errorf("embedded ImgSz %d beside imgsz 640: %v, want ok=%v", tc.embedded, err, tc.ok)
		}
	}
}
