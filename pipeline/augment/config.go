package augment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

//go:generate go run ./internal/gen -python ../../python/segpipe/_augment.py

// Config holds the augmentation hyper-parameters. Start from DefaultConfig:
// several zero values (Mosaic, the flips, BGR, the HSV gains) mean "off".
//
// Config is the one table of the augmentation settings. Every field but
// ImgSz is a setting, and its tags say everything the rest of the project
// needs to know about it, so that adding a setting is adding a field here
// and the code that applies it (with its test), nothing else:
//
//   - json: its name, the same in a loader request's "augment" object
//     (pipeline/remote), in a training run's config and config.json
//     (trainer/train's Config embeds this one), in the flags of every
//     command that makes or trains on batches ('-' for '_': cli's
//     augmentFlags), and in the Python package (python/segpipe/_augment.py,
//     generated from this table; the Ultralytics adapter passes on each
//     setting Ultralytics also has);
//   - default: its value in DefaultConfig, as Go source would spell it;
//   - max: for a float64 setting, the largest value Validate accepts (the
//     smallest is 0; "inf" for no bound); uint8 and bool settings take
//     every value of their type;
//   - enum: for a string setting, its values, comma-separated: Validate,
//     a request and a flag accept those only, and the default is one;
//   - usage: one line for flag help and the Python docs.
//
// Settings lists the table; a test holds every field to these rules.
type Config struct {
	ImgSz int `json:"-"` // output canvas side s (square), default 640; a request carries it apart

	// Mosaic is the probability of a 4-image mosaic.
	Mosaic float64 `json:"mosaic" default:"1" max:"1" usage:"mosaic probability"`
	// Degrees is the rotation range ±degrees.
	Degrees float64 `json:"degrees" default:"0" max:"180" usage:"rotation range ±degrees"`
	// Translate is the translation fraction ±.
	Translate float64 `json:"translate" default:"0.1" max:"1" usage:"translation augmentation fraction"`
	// Scale is the scale gain: the factor is uniform in [1-Scale, 1+Scale].
	Scale float64 `json:"scale" default:"0.5" max:"0.99" usage:"scale augmentation gain"`
	// ScaleMin and ScaleMax, when ScaleMax is not 0, replace the gain by a
	// range: the factor is uniform in [ScaleMin, ScaleMax], as Ultralytics'
	// scale=(min, max) tuple gives it. 0 < ScaleMin ≤ ScaleMax (a factor
	// of 0 or below has no image to show).
	ScaleMin float64 `json:"scale_min" default:"0" max:"16" usage:"scale range: least factor (with scale_max; replaces the gain)"`
	ScaleMax float64 `json:"scale_max" default:"0" max:"16" usage:"scale range: largest factor (0: use the gain)"`
	// Shear is the shear range ±degrees.
	Shear float64 `json:"shear" default:"0" max:"89" usage:"shear range ±degrees"`
	// Perspective is the perspective range ±.
	Perspective float64 `json:"perspective" default:"0" max:"0.01" usage:"perspective range ±"`
	// HSVH, HSVS and HSVV are the hue, saturation and value gains.
	HSVH float64 `json:"hsv_h" default:"0.015" max:"1" usage:"hue augmentation gain"`
	HSVS float64 `json:"hsv_s" default:"0.7" max:"1" usage:"saturation augmentation gain"`
	HSVV float64 `json:"hsv_v" default:"0.4" max:"1" usage:"value augmentation gain"`
	// FlipUD is the vertical flip probability (Ultralytics' flipud).
	FlipUD float64 `json:"flipud" default:"0" max:"1" usage:"vertical flip probability"`
	// FlipLR is the horizontal flip probability.
	FlipLR float64 `json:"fliplr" default:"0.5" max:"1" usage:"horizontal flip probability"`
	// BGR is the probability that a training image is returned with its
	// channels in BGR order (Ultralytics' bgr).
	BGR float64 `json:"bgr" default:"0" max:"1" usage:"RGB to BGR channel swap probability"`
	// Mixup is the probability that a Train sample is blended with a
	// second one, as Ultralytics' MixUp (see NewMixPlan).
	Mixup float64 `json:"mixup" default:"0" max:"1" usage:"mixup probability"`
	// Cutmix is the probability that a Train sample takes a region of a
	// second one, as Ultralytics' CutMix (see NewCutPlan).
	Cutmix float64 `json:"cutmix" default:"0" max:"1" usage:"cutmix probability"`
	// CopyPaste is Ultralytics' copy_paste: the share of a Train sample's
	// eligible instances pasted, and in mixup mode also the probability
	// of a paste (see NewFlipPaste and NewMixPaste).
	CopyPaste float64 `json:"copy_paste" default:"0" max:"1" usage:"copy-paste: share of eligible instances pasted (mixup mode: also its probability)"`
	// CopyPasteMode is where pasted instances come from: "flip", the
	// image's own mirrored left-right, or "mixup", a second sample's.
	CopyPasteMode string `json:"copy_paste_mode" default:"flip" enum:"flip,mixup" usage:"copy-paste source: the image's own instances mirrored, or another image's"`
	// Fill is the padding value.
	Fill uint8 `json:"fill" default:"114" usage:"padding value"`

	// Candidate rule (see package doc).
	MinSide   float64 `json:"min_side" default:"2" max:"inf" usage:"candidate rule: least box side after clipping, px"`
	MinArea   float64 `json:"min_area" default:"0.01" max:"1" usage:"candidate rule: least kept area / area before clipping"`
	MaxAspect float64 `json:"max_aspect" default:"100" max:"inf" usage:"candidate rule: largest box aspect ratio"`

	// KeepCrowd keeps iscrowd instances (rasterised from their RLE or
	// polygons, flagged in the batch's iscrowd column) instead of dropping
	// them as YOLO training does; validation sets it.
	KeepCrowd bool `json:"keep_crowd" default:"false" usage:"keep crowd instances (flagged) instead of dropping them"`

	// MaskRule is how an instance's polygons become its mask cells
	// (pipeline/raster's Rule): "exact", a cell ON iff its centre is
	// inside, or "ultralytics", Ultralytics' polygon2mask cell for cell.
	MaskRule string `json:"mask_rule" default:"exact" enum:"exact,ultralytics" usage:"mask rule: exact (cell centre inside) or ultralytics (polygon2mask's, cell for cell)"`
}

// DefaultImgSz is DefaultConfig's ImgSz.
const DefaultImgSz = 640

// MaxImgSz is the largest ImgSz Validate accepts.
const MaxImgSz = 1 << 14

// Setting describes one augmentation setting: one field of Config and its
// tags.
type Setting struct {
	Name  string       // the json tag: the setting's name everywhere
	Field string       // the Config field
	Kind  reflect.Kind // reflect.Float64, reflect.Uint8, reflect.Bool or reflect.String
	// Default is DefaultConfig's value: a float64, uint8, bool or string.
	Default any
	// Max bounds a float64 setting: Validate accepts [0, Max] (+Inf: no
	// upper bound). 0 for the other kinds.
	Max float64
	// Enum lists a string setting's values, the only ones accepted; nil
	// for the other kinds.
	Enum  []string
	Usage string
	index int
}

// table is Config's tags, parsed once; defaults is DefaultConfig.
var table, defaults = mustParseTable()

// Settings returns the table of settings in Config's field order.
func Settings() []Setting { return append([]Setting(nil), table...) }

// Lookup returns the setting called name.
func Lookup(name string) (Setting, bool) {
	for _, s := range table {
		if s.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// Value returns a pointer to c's field for s, a setting of Settings or
// Lookup: a *float64, *uint8, *bool or *string, as s.Kind says.
func (c *Config) Value(s Setting) any {
	return reflect.ValueOf(c).Elem().Field(s.index).Addr().Interface()
}

// DefaultConfig returns the widely used YOLO defaults.
func DefaultConfig() Config { return defaults }

// mustParseTable reads Config's tags. A malformed tag is a mistake in
// this file, which every test of the package reports at once.
func mustParseTable() ([]Setting, Config) {
	t, d, err := parseTable()
	if err != nil {
		panic(err)
	}
	return t, d
}

func parseTable() ([]Setting, Config, error) {
	d := Config{ImgSz: DefaultImgSz}
	dv := reflect.ValueOf(&d).Elem()
	ct := dv.Type()
	var out []Setting
	for i := range ct.NumField() {
		f := ct.Field(i)
		name := f.Tag.Get("json")
		if name == "-" {
			continue
		}
		s := Setting{Name: name, Field: f.Name, Kind: f.Type.Kind(), Usage: f.Tag.Get("usage"), index: i}
		def, ok := f.Tag.Lookup("default")
		if name == "" || !ok || s.Usage == "" {
			return nil, Config{}, fmt.Errorf("augment: Config.%s: want json, default and usage tags", f.Name)
		}
		var err error
		switch s.Kind {
		case reflect.Float64:
			var x float64
			if x, err = strconv.ParseFloat(def, 64); err == nil {
				if s.Max, err = strconv.ParseFloat(f.Tag.Get("max"), 64); err == nil && !(x >= 0 && x <= s.Max) {
					err = fmt.Errorf("default %v outside [0, %v]", x, s.Max)
				}
			}
			s.Default = x
			dv.Field(i).SetFloat(x)
		case reflect.Uint8:
			var n uint64
			n, err = strconv.ParseUint(def, 10, 8)
			s.Default = uint8(n)
			dv.Field(i).SetUint(n)
		case reflect.Bool:
			var b bool
			b, err = strconv.ParseBool(def)
			s.Default = b
			dv.Field(i).SetBool(b)
		case reflect.String:
			s.Enum = strings.Split(f.Tag.Get("enum"), ",")
			if slices.Contains(s.Enum, "") || len(s.Enum) != len(slices.Compact(slices.Sorted(slices.Values(s.Enum)))) {
				err = fmt.Errorf("enum %q: want distinct non-empty values", f.Tag.Get("enum"))
			} else if !slices.Contains(s.Enum, def) {
				err = fmt.Errorf("default %q not one of %s", def, strings.Join(s.Enum, ", "))
			}
			s.Default = def
			dv.Field(i).SetString(def)
		default:
			err = fmt.Errorf("type %s: want float64, uint8, bool or string", f.Type)
		}
		if err == nil && s.Kind != reflect.Float64 && f.Tag.Get("max") != "" {
			err = errors.New("max applies to float64 settings only")
		}
		if err == nil && s.Kind != reflect.String && f.Tag.Get("enum") != "" {
			err = errors.New("enum applies to string settings only")
		}
		if err != nil {
			return nil, Config{}, fmt.Errorf("augment: Config.%s: %w", f.Name, err)
		}
		out = append(out, s)
	}
	return out, d, nil
}

// Validate reports a configuration that cannot be used.
func (c Config) Validate() error {
	if c.ImgSz <= 0 || c.ImgSz > MaxImgSz {
		return fmt.Errorf("augment: imgsz %d out of range (1..%d)", c.ImgSz, MaxImgSz)
	}
	v := reflect.ValueOf(c)
	for _, s := range table {
		switch s.Kind {
		case reflect.Float64:
			if x := v.Field(s.index).Float(); !(x >= 0 && x <= s.Max) {
				return fmt.Errorf("augment: %s %v out of range [0, %v]", s.Name, x, s.Max)
			}
		case reflect.String:
			if err := s.CheckEnum(v.Field(s.index).String()); err != nil {
				return err
			}
		}
	}
	if (c.ScaleMax != 0 || c.ScaleMin != 0) && !(c.ScaleMin > 0 && c.ScaleMin <= c.ScaleMax) {
		return fmt.Errorf("augment: scale range [%v, %v]: want 0 < scale_min <= scale_max", c.ScaleMin, c.ScaleMax)
	}
	return nil
}

// CheckEnum reports a value v that string setting s does not take,
// naming the setting and the values it does.
func (s Setting) CheckEnum(v string) error {
	if !slices.Contains(s.Enum, v) {
		return fmt.Errorf("augment: %s %q: want one of %s", s.Name, v, strings.Join(s.Enum, ", "))
	}
	return nil
}

// scaleRange returns the interval the scale factor is drawn from.
func (c *Config) scaleRange() (lo, hi float64) {
	if c.ScaleMax != 0 {
		return c.ScaleMin, c.ScaleMax
	}
	return 1 - c.Scale, 1 + c.Scale
}

// UnmarshalJSON reads the settings a JSON object names over DefaultConfig
// (ImgSz is not one of them): a missing or null key keeps the default and
// an unknown key is an error, so that a client never believes a setting
// was applied when this version does not know it, and a string setting
// outside its values is an error naming it (Setting.CheckEnum). This is a
// loader request's "augment" object.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config // without this method
	p := plain(DefaultConfig())
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && e.Field == "" {
			e.Type = reflect.TypeFor[Config]() // not the local type's name
		}
		return err
	}
	v := reflect.ValueOf(p)
	for _, s := range table {
		if s.Kind == reflect.String {
			if err := s.CheckEnum(v.Field(s.index).String()); err != nil {
				return err
			}
		}
	}
	*c = Config(p)
	return nil
}
