package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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
		Config: augment.Config{
			Mosaic: 1, FlipLR: 0.5, HSVH: 0.015, HSVS: 0.7, HSVV: 0.4, Scale: 0.5, Translate: 0.1,
			CopyPasteMode: "flip", MaskRule: "exact", Fill: 114, MinSide: 2, MinArea: 0.01, MaxAspect: 100,
		},
		CloseMosaic: 10, Conf: 0.001, MaxDet: 300,
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig\n%+v\nwant\n%+v", got, want)
	}
	c := DefaultConfig()
	if a := c.Augment(); a != augment.DefaultConfig() {
		t.Errorf("default config's augmentation %+v, want augment.DefaultConfig", a)
	}
}

// nonDefault is a value of s other than its default, as Go and as text.
func nonDefault(s augment.Setting) (any, string) {
	switch d := s.Default.(type) {
	case float64:
		x := d/2 + 0.125 // inside [0, Max] for every Max ≥ 0.25 and default ≤ Max
		x = min(x, s.Max)
		if x == d {
			x = 0
		}
		return x, fmt.Sprint(x)
	case uint8:
		return d ^ 1, fmt.Sprint(d ^ 1)
	case bool:
		return !d, fmt.Sprint(!d)
	case string:
		v := s.Enum[(slices.Index(s.Enum, d)+1)%len(s.Enum)]
		return v, v
	}
	panic(fmt.Sprintf("setting %s of type %T", s.Name, s.Default))
}

// Every augmentation setting of the table is a key of the run, and a flag:
// Set takes its text, a config file its JSON value, Augment hands it to
// the loader and config.json keeps it. A setting added to the table needs
// nothing here.
func TestEverySettingIsAKey(t *testing.T) {
	keys := Keys()
	for _, s := range augment.Settings() {
		t.Run(s.Name, func(t *testing.T) {
			if !slices.Contains(keys, s.Name) {
				t.Fatalf("Keys() lacks %s", s.Name)
			}
			v, text := nonDefault(s)
			want := augment.DefaultConfig()
			want.ImgSz = 96
			reflect.ValueOf(want.Value(s)).Elem().Set(reflect.ValueOf(v))

			c := DefaultConfig()
			c.Imgsz = 96
			if err := c.Set(s.Name, text); err != nil {
				t.Fatal(err)
			}
			if a := c.Augment(); a != want {
				t.Errorf("Set(%s, %s): Augment\n%+v\nwant\n%+v", s.Name, text, a, want)
			}
			if err := c.Set(s.Name, "x"); err == nil || !strings.Contains(err.Error(), s.Name) {
				t.Errorf("Set(%s, x): %v", s.Name, err)
			}

			file := filepath.Join(t.TempDir(), "c.json")
			b, _ := json.Marshal(map[string]any{s.Name: v})
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			c = DefaultConfig()
			c.Imgsz = 96
			if err := c.LoadConfig(file); err != nil {
				t.Fatal(err)
			}
			if a := c.Augment(); a != want {
				t.Errorf("config file %s: Augment\n%+v\nwant\n%+v", b, a, want)
			}
		})
	}
	// The run's own keys stay where they were, and a setting is never
	// listed twice.
	for _, k := range []string{"imgsz", "close_mosaic", "conf"} {
		if !slices.Contains(keys, k) {
			t.Errorf("Keys() lacks %s", k)
		}
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Errorf("key %s listed twice", k)
		}
		seen[k] = true
	}
}

// A config decodes field by field: the embedded augment.Config's decoder
// (a loader request's, which starts from the defaults and knows only the
// settings) must not take the whole object, or a config file and a run's
// config.json would stop loading.
func TestConfigIsNotAJSONUnmarshaler(t *testing.T) {
	u := reflect.TypeFor[json.Unmarshaler]()
	for _, typ := range []reflect.Type{reflect.TypeFor[Config](), reflect.TypeFor[runMeta]()} {
		if typ.Implements(u) || reflect.PointerTo(typ).Implements(u) {
			t.Errorf("%s is a json.Unmarshaler", typ)
		}
	}
}

// oldRunConfig is a run directory's config.json as written before the
// augmentation settings were embedded (seven of them, between ema_tau and
// conf): runs on disk hold this, and --resume and --config read it.
const oldRunConfig = `{
  "shards": "/data/train", "variant": "n", "classes": 0, "epochs": 100, "batch": 16, "imgsz": 640,
  "device": "cpu", "seed": 0, "workers": 0, "optimizer": "auto", "lr0": 0.01, "lrf": 0.01,
  "momentum": 0.937, "weight_decay": 0.0005, "warmup_epochs": 3, "warmup_momentum": 0.8,
  "warmup_bias_lr": 0.1, "nbs": 64, "clip_norm": 10, "ema_tau": 2000, "mosaic": 0.25,
  "close_mosaic": 10, "fliplr": 0, "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4, "scale": 0.5,
  "translate": 0.1, "conf": 0.001, "max_det": 300, "val_every": 0, "save_every": 0,
  "categories": [{"id": 1, "index": 0, "name": "person"}]
}`

// A run directory written before keeps its settings (those it does not
// name take the defaults, as then), and a config.json written now reads
// back to the config that wrote it, every setting changed.
func TestRunConfigRoundTrips(t *testing.T) {
	old := DefaultConfig()
	old.Shards, old.Mosaic, old.FlipLR = "/data/train", 0.25, 0

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(oldRunConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRunConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != old {
		t.Errorf("old config.json read as\n%+v\nwant\n%+v", got, old)
	}
	c := DefaultConfig()
	if err := c.LoadConfig(filepath.Join(dir, ConfigFile)); err != nil {
		t.Fatal(err)
	}
	if c != old {
		t.Errorf("old config.json as --config\n%+v\nwant\n%+v", c, old)
	}

	now := DefaultConfig()
	now.Shards, now.Imgsz = "/data/train", 320
	for _, s := range augment.Settings() {
		v, _ := nonDefault(s)
		reflect.ValueOf(now.Value(s)).Elem().Set(reflect.ValueOf(v))
	}
	d := &runDir{path: t.TempDir(), cfg: now}
	if err := d.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadRunConfig(d.path); err != nil || got != now {
		t.Errorf("config.json read back as\n%+v (%v)\nwant\n%+v", got, err, now)
	}
	b, _ := os.ReadFile(d.file(ConfigFile))
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, s := range augment.Settings() {
		if _, ok := keys[s.Name]; !ok {
			t.Errorf("config.json lacks %s:\n%s", s.Name, b)
		}
	}
}

// A setting out of its range is a configuration error naming it, found
// before a run opens anything.
func TestValidateSettingRanges(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"mosaic", "2", "mosaic 2"},
		{"degrees", "181", "degrees 181"},
		{"scale", "1", "scale 1"},
	} {
		c := DefaultConfig()
		if err := c.Set(tc.key, tc.value); err != nil {
			t.Fatal(err)
		}
		if err := c.validateSettings(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
	if err := (&Config{}).Set("fill", "256"); err == nil || !strings.Contains(err.Error(), "fill") {
		t.Errorf("fill=256: %v", err)
	}
}
