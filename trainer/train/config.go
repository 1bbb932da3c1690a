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
	Classes int `json:"classes"`
	Epochs  int `json:"epochs"`
	Batch   int `json:"batch"`
	// Imgsz is the run's canvas side, the one size of a run: the key and
	// flag imgsz. The embedded augment.Config also has an ImgSz, which
	// stays zero in a Config (see below); Augment hands Imgsz to the
	// loader in it.
	Imgsz  int    `json:"imgsz"`
	Device string `json:"device"`
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

	// The embedded augment.Config is the loader's augmentation settings
	// (the one table of them), under their own keys: a setting added to
	// the table is a key and a flag of every run.
	//
	// Its ImgSz is not the run's size, and two fields exist because the
	// two JSON forms disagree: in the table, a json name makes a field a
	// setting (a request's "augment" key, a Python constant, a flag of
	// every command), and the canvas is not one (a request carries it
	// apart), so ImgSz is json:"-"; a run's config, config.json and
	// checkpoints have always keyed the size "imgsz", after "batch", and
	// must keep loading. So Imgsz above carries the key, the embedded
	// ImgSz has none (no file, flag or Set reaches it: it stays zero),
	// Augment copies Imgsz into it, and Validate refuses a Config whose
	// embedded ImgSz was set to anything else.
	augment.Config
	// CloseMosaic turns mosaic off for the last CloseMosaic epochs.
	CloseMosaic int `json:"close_mosaic"`
	// noAugmentJSON keeps augment.Config.UnmarshalJSON, which reads a
	// loader request's object, from being promoted: a config, and the run
	// directory's config.json that embeds it, decode field by field.
	noAugmentJSON

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
	a := augment.DefaultConfig()
	a.ImgSz = 0 // Imgsz is the run's
	return Config{
		Variant: "n", Epochs: 100, Batch: 16, Imgsz: augment.DefaultImgSz, Device: "cpu",
		Optimizer: "auto", LR0: 0.01, LRF: 0.01, Momentum: 0.937, WeightDecay: 0.0005,
		WarmupEpochs: 3, WarmupMomentum: 0.8, WarmupBiasLR: 0.1, NBS: 64, ClipNorm: 10, EMATau: 2000,
		Config: a, CloseMosaic: 10, Conf: 0.001, MaxDet: 300,
	}
}

// Augment returns the loader's augmentation settings for this config: the
// run's settings at its Imgsz.
func (c *Config) Augment() augment.Config {
	a := c.Config
	a.ImgSz = c.Imgsz
	return a
}

// noAugmentJSON has an UnmarshalJSON method at the depth of the embedded
// augment.Config's, so that neither is in Config's method set (Go drops
// an ambiguous promoted method) and encoding/json decodes Config's fields,
// the settings among them, one by one. It is never called.
type noAugmentJSON struct{}

func (noAugmentJSON) UnmarshalJSON([]byte) error { return nil }

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
// flags), in field order, the augmentation settings among them; Set
// accepts these and the data paths.
func Keys() []string {
	out := []string{}
	for _, f := range keyFields {
		if f.Tag.Get("cli") != "-" {
			out = append(out, jsonName(f))
		}
	}
	return out
}

// keyFields are Config's keyed fields, the embedded settings included, in
// JSON order.
var keyFields = func() []reflect.StructField {
	var out []reflect.StructField
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.IsExported() && !f.Anonymous && jsonName(f) != "-" {
			out = append(out, f)
		}
	}
	return out
}()

func jsonName(f reflect.StructField) string {
	return strings.Split(f.Tag.Get("json"), ",")[0]
}

// Set assigns one key from its text form; flags use it so that a flag
// given on the command line overrides the config file.
func (c *Config) Set(key, value string) error {
	i := slices.IndexFunc(keyFields, func(f reflect.StructField) bool { return jsonName(f) == key })
	if i < 0 {
		return fmt.Errorf("config: unknown key %q (known: %s)", key, strings.Join(Keys(), ", "))
	}
	f := reflect.ValueOf(c).Elem().FieldByIndex(keyFields[i].Index)
	var err error
	switch f.Kind() {
	case reflect.String:
		if st, ok := augment.Lookup(key); ok && st.Kind == reflect.String {
			err = st.CheckEnum(value) // a setting of the table takes its values only
		}
		if err == nil {
			f.SetString(value)
		}
	case reflect.Int:
		var n int
		if n, err = strconv.Atoi(value); err == nil {
			f.SetInt(int64(n))
		}
	case reflect.Uint8, reflect.Uint64:
		var n uint64
		if n, err = strconv.ParseUint(value, 10, f.Type().Bits()); err == nil {
			f.SetUint(n)
		}
	case reflect.Float64:
		var x float64
		if x, err = strconv.ParseFloat(value, 64); err == nil {
			f.SetFloat(x)
		}
	case reflect.Bool:
		var b bool
		if b, err = strconv.ParseBool(value); err == nil {
			f.SetBool(b)
		}
	default:
		err = fmt.Errorf("type %s has no text form", f.Type()) // a field this function does not know
	}
	if err != nil {
		return fmt.Errorf("config %s=%q: %w", key, value, err)
	}
	return nil
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
	if c.Config.ImgSz != 0 && c.Config.ImgSz != c.Imgsz {
		return fmt.Errorf("config: augment ImgSz %d beside imgsz %d: the run's size is Imgsz", c.Config.ImgSz, c.Imgsz)
	}
	if err := c.Augment().Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
