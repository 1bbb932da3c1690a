package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/trainer/device"
)

// Config is the effective configuration of a training run. It is written
// to RUN_DIR/config.json and into every checkpoint's metadata, so a run
// can be repeated or resumed from it alone. JSON keys are the flag names
// of `segpipe train`.
type Config struct {
	// Shards and ValShards are the data directories (absolute paths once
	// a run starts). `segpipe train` has its own flags for them.
	Shards    string `json:"shards,omitempty" cli:"-"`
	ValShards string `json:"val_shards,omitempty" cli:"-"`
	// Remote is the segpipe server (host:port) the batches came from; the
	// shard paths then name shard sets below the server's root.
	Remote string `json:"remote,omitempty" cli:"-"`

	// Variant is the model scale (n, s, m, l, x). It comes from the
	// config's content or --variant, never from a file name.
	Variant string `json:"variant"`
	// Classes is the class count; 0 takes it from the training shards.
	Classes int    `json:"classes"`
	Epochs  int    `json:"epochs"`
	Batch   int    `json:"batch"`
	Imgsz   int    `json:"imgsz"`
	Device  string `json:"device"`
	// Precision is the math of a cuda device: "tf32" (the default, "":
	// PyTorch's, TF32 convolutions and fp32 GEMMs) or "fp32" (strict, as
	// the CPU). It changes nothing on cpu and emu.
	Precision string `json:"precision,omitempty"`
	Seed      uint64 `json:"seed"`
	Workers   int    `json:"workers"` // loader goroutines; 0 = GOMAXPROCS
	// Weights initialises the model from a checkpoint (same variant and
	// class count) instead of the reference's random initialisation.
	Weights string `json:"weights,omitempty"`

	// Optimizer is auto (MuSGD with the reference's automatic lr), musgd,
	// sgd or adamw. LR0 is ignored under auto.
	Optimizer      string  `json:"optimizer"`
	LR0            float64 `json:"lr0"`
	LRF            float64 `json:"lrf"`
	Momentum       float64 `json:"momentum"`
	WeightDecay    float64 `json:"weight_decay"`
	WarmupEpochs   float64 `json:"warmup_epochs"`
	WarmupMomentum float64 `json:"warmup_momentum"`
	WarmupBiasLR   float64 `json:"warmup_bias_lr"`
	NBS            int     `json:"nbs"` // nominal batch: gradients accumulate to it
	ClipNorm       float64 `json:"clip_norm"`
	EMATau         float64 `json:"ema_tau"`

	// Augmentation: the loader settings a run exposes. A field whose key
	// is the name of an augment.Setting is that setting: its default is
	// augment.DefaultConfig's and the loader gets its value (Augment), so
	// exposing another setting is adding its field here. The settings
	// not listed keep their defaults.
	Mosaic      float64 `json:"mosaic"`
	CloseMosaic int     `json:"close_mosaic"`
	FlipLR      float64 `json:"fliplr"`
	HSVH        float64 `json:"hsv_h"`
	HSVS        float64 `json:"hsv_s"`
	HSVV        float64 `json:"hsv_v"`
	Scale       float64 `json:"scale"`
	Translate   float64 `json:"translate"`

	// Validation: score threshold and detections kept per image.
	Conf   float64 `json:"conf"`
	MaxDet int     `json:"max_det"`
	// ValEvery validates every ValEvery epochs (and always after the
	// last); 0 means every epoch.
	ValEvery int `json:"val_every"`
	// SaveEvery also saves the resumable state every SaveEvery iterations
	// within an epoch (0: at epoch ends and on interruption only), so a
	// crash in a long epoch loses at most that many batches.
	SaveEvery int `json:"save_every"`
}

// DefaultConfig returns the reference's defaults (cfg/default.yaml) for a
// variant-n run at 640; the augmentation settings are the loader's
// (augment.DefaultConfig).
func DefaultConfig() Config {
	c := Config{
		Variant: "n", Epochs: 100, Batch: 16, Imgsz: augment.DefaultImgSz, Device: "cpu",
		Optimizer: "auto", LR0: 0.01, LRF: 0.01, Momentum: 0.937, WeightDecay: 0.0005,
		WarmupEpochs: 3, WarmupMomentum: 0.8, WarmupBiasLR: 0.1, NBS: 64, ClipNorm: 10, EMATau: 2000,
		CloseMosaic: 10, Conf: 0.001, MaxDet: 300,
	}
	a := augment.DefaultConfig()
	v := reflect.ValueOf(&c).Elem()
	for _, f := range augmentFields {
		v.Field(f.index).Set(reflect.ValueOf(a.Value(f.Setting)).Elem())
	}
	return c
}

// Augment returns the loader's augmentation settings for this config: the
// defaults, with Imgsz and every setting the config exposes.
func (c *Config) Augment() augment.Config {
	a := augment.DefaultConfig()
	a.ImgSz = c.Imgsz
	v := reflect.ValueOf(c).Elem()
	for _, f := range augmentFields {
		reflect.ValueOf(a.Value(f.Setting)).Elem().Set(v.Field(f.index))
	}
	return a
}

// augmentField is a field of Config that is an augmentation setting.
type augmentField struct {
	augment.Setting
	index int
}

// augmentFields lists Config's augmentation settings, matched by key; a
// test holds each field's type to its setting's.
var augmentFields = func() []augmentField {
	var out []augmentField
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if s, ok := augment.Lookup(jsonName(t.Field(i))); ok {
			out = append(out, augmentField{s, i})
		}
	}
	return out
}()

// LoadConfig reads a JSON config over c: keys present in the file replace
// c's values, absent keys keep them. Unknown keys are errors (a typo must
// not silently fall back to a default). A run's own config.json is a
// config too: its category table, which a new run takes from its shards,
// is read past.
func (c *Config) LoadConfig(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	file := struct {
		*Config
		Categories json.RawMessage `json:"categories"`
	}{Config: c}
	if err := dec.Decode(&file); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Keys lists the keys that are also flags (JSON names, '-' for '_' in
// flags), in field order; Set accepts these and the data paths.
func Keys() []string {
	t := reflect.TypeFor[Config]()
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("cli") != "-" {
			out = append(out, jsonName(t.Field(i)))
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	return strings.Split(f.Tag.Get("json"), ",")[0]
}

// Set assigns one key from its text form; flags use it so that a flag
// given on the command line overrides the config file.
func (c *Config) Set(key, value string) error {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if jsonName(t.Field(i)) != key {
			continue
		}
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(value)
		case reflect.Int:
			n, err := strconv.Atoi(value)
			if err != nil {
				return fmt.Errorf("config %s=%q: %w", key, value, err)
			}
			f.SetInt(int64(n))
		case reflect.Uint64:
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return fmt.Errorf("config %s=%q: %w", key, value, err)
			}
			f.SetUint(n)
		case reflect.Float64:
			x, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return fmt.Errorf("config %s=%q: %w", key, value, err)
			}
			f.SetFloat(x)
		}
		return nil
	}
	return fmt.Errorf("config: unknown key %q (known: %s)", key, strings.Join(Keys(), ", "))
}

// ErrDevice is returned for a device this build cannot train on.
var ErrDevice = device.ErrUnavailable

// Validate reports a configuration that cannot run, including a device
// this host cannot open.
func (c *Config) Validate() error {
	if err := c.validateSettings(); err != nil {
		return err
	}
	if c.Device == "cuda" {
		if _, err := device.OpenPrecision(c.Device, c.Precision); err != nil {
			return err
		}
	}
	return nil
}

// validateSettings is Validate without opening the device.
func (c *Config) validateSettings() error {
	switch c.Device {
	case "cpu", "emu", "cuda":
	default:
		return fmt.Errorf("config: device %q: want cpu, emu or cuda", c.Device)
	}
	if c.Precision != "" && !slices.Contains(device.Precisions, c.Precision) {
		return fmt.Errorf("config: precision %q: want %s", c.Precision, strings.Join(device.Precisions, " or "))
	}
	if !slices.Contains([]string{"n", "s", "m", "l", "x"}, c.Variant) {
		return fmt.Errorf("config: variant %q: want n, s, m, l or x", c.Variant)
	}
	if !slices.Contains([]string{"auto", "musgd", "sgd", "adamw"}, c.Optimizer) {
		return fmt.Errorf("config: optimizer %q: want auto, musgd, sgd or adamw", c.Optimizer)
	}
	switch {
	case c.Epochs < 1:
		return fmt.Errorf("config: epochs %d: want ≥ 1", c.Epochs)
	case c.Batch < 1:
		return fmt.Errorf("config: batch %d: want ≥ 1", c.Batch)
	case c.Imgsz < 32 || c.Imgsz%32 != 0:
		return fmt.Errorf("config: imgsz %d: want a positive multiple of 32", c.Imgsz)
	case c.NBS < 1:
		return fmt.Errorf("config: nbs %d: want ≥ 1", c.NBS)
	case c.Classes < 0:
		return fmt.Errorf("config: classes %d", c.Classes)
	case c.MaxDet < 1:
		return fmt.Errorf("config: max_det %d: want ≥ 1", c.MaxDet)
	case !(c.LR0 >= 0) || !(c.LRF >= 0) || !(c.ClipNorm > 0) || !(c.EMATau > 0):
		return fmt.Errorf("config: lr0 %v, lrf %v, clip_norm %v, ema_tau %v: want lr0, lrf ≥ 0 and clip_norm, ema_tau > 0", c.LR0, c.LRF, c.ClipNorm, c.EMATau)
	case c.Workers < 0 || c.ValEvery < 0 || c.CloseMosaic < 0 || c.SaveEvery < 0:
		return fmt.Errorf("config: workers %d, val_every %d, close_mosaic %d, save_every %d: want ≥ 0", c.Workers, c.ValEvery, c.CloseMosaic, c.SaveEvery)
	}
	return nil
}
