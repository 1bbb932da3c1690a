package augment

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// The defaults the table's tags give are the widely used YOLO ones, value
// for value: batches, goldens and tickets depend on them.
func TestDefaultConfigPinned(t *testing.T) {
	want := Config{
		ImgSz: 640, Mosaic: 1, Translate: 0.1, Scale: 0.5,
		HSVH: 0.015, HSVS: 0.7, HSVV: 0.4, FlipLR: 0.5, CopyPasteMode: "flip", Fill: 114,
		MinSide: 2, MinArea: 0.01, MaxAspect: 100, MaskRule: "exact",
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig\n%+v\nwant\n%+v", got, want)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// Every field but ImgSz is a setting of the table, in field order, and
// Value reaches that field.
func TestSettingsCoverConfig(t *testing.T) {
	ct := reflect.TypeFor[Config]()
	set := Settings()
	if len(set) != ct.NumField()-1 {
		t.Fatalf("%d settings for %d fields besides ImgSz", len(set), ct.NumField()-1)
	}
	var c Config
	for i, s := range set {
		f := ct.Field(i + 1)
		if s.Field != f.Name || s.Kind != f.Type.Kind() || s.Name != f.Tag.Get("json") {
			t.Errorf("setting %d: %+v, field %s %s", i, s, f.Name, f.Type)
		}
		if got, ok := Lookup(s.Name); !ok || got.Field != s.Field {
			t.Errorf("Lookup(%q) = %+v, %v", s.Name, got, ok)
		}
		if reflect.TypeOf(c.Value(s)).Elem() != f.Type {
			t.Errorf("Value(%s) is %T", s.Name, c.Value(s))
		}
		d := DefaultConfig()
		if got := reflect.ValueOf(d.Value(s)).Elem().Interface(); got != s.Default {
			t.Errorf("%s: DefaultConfig has %v, the table %v", s.Name, got, s.Default)
		}
	}
	if _, ok := Lookup("imgsz"); ok {
		t.Error("imgsz is a setting; a request carries it apart")
	}
}

// Validate accepts every float setting on [0, Max] and names the setting
// outside it.
func TestValidateRanges(t *testing.T) {
	for _, s := range Settings() {
		if s.Kind != reflect.Float64 {
			continue
		}
		c := DefaultConfig()
		p := c.Value(s).(*float64)
		// The ends of the scale range are valid together only: move both.
		pair := p
		switch s.Name {
		case "scale_min":
			pair = &c.ScaleMax
		case "scale_max":
			pair = &c.ScaleMin
		}
		for _, ok := range []float64{0, s.Max} {
			if *p, *pair = ok, ok; c.Validate() != nil {
				t.Errorf("%s %v refused: %v", s.Name, ok, c.Validate())
			}
		}
		for _, bad := range []float64{-1, s.Max * 2, math.NaN()} {
			if math.IsInf(bad, 1) {
				continue
			}
			*p = bad
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "augment: "+s.Name+" ") {
				t.Errorf("%s %v: %v", s.Name, bad, err)
			}
		}
	}
	for _, sz := range []int{0, -1, MaxImgSz + 1} {
		c := DefaultConfig()
		c.ImgSz = sz
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "imgsz") {
			t.Errorf("imgsz %d: %v", sz, err)
		}
	}
}

// A JSON object overrides the settings it names over the defaults; null
// keeps one, and an unknown name or a wrong type is an error naming it.
func TestUnmarshalOverDefaults(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"mosaic":0.25,"fill":3,"hsv_h":null,"keep_crowd":true}`), &c); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Mosaic, want.Fill, want.KeepCrowd = 0.25, 3, true
	if c != want {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"mosaik":1}`, `unknown field "mosaik"`},
		{`{"imgsz":64}`, `unknown field "imgsz"`},
		{`{"fill":256}`, "uint8"},
		{`{"keep_crowd":1}`, "bool"},
		{`5`, "augment.Config"},
	} {
		if err := json.Unmarshal([]byte(tc.in), &c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
	// The defaults marshal to the object NewRequest puts in a ticket: these
	// are the wire names and values of every setting so far, which a new
	// setting joins without changing them.
	b, _ := json.Marshal(DefaultConfig())
	const obj = `{"mosaic":1,"degrees":0,"translate":0.1,"scale":0.5,"shear":0,"perspective":0,"hsv_h":0.015,"hsv_s":0.7,"hsv_v":0.4,"fliplr":0.5,"fill":114,"min_side":2,"min_area":0.01,"max_aspect":100,"keep_crowd":false}`
	var wire, pinned map[string]any
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(obj), &pinned)
	for k, v := range pinned {
		if wire[k] != v {
			t.Errorf("defaults marshal %s as %v, want %v (all: %s)", k, wire[k], v, b)
		}
	}
	if len(wire) != len(Settings()) {
		t.Errorf("defaults marshal %d settings, the table has %d: %s", len(wire), len(Settings()), b)
	}
}

// A string setting takes the values its enum tag lists and nothing else:
// Validate and a request's JSON both refuse another, naming the setting
// and the values it takes; the default is one of them.
func TestEnumSettings(t *testing.T) {
	n := 0
	for _, s := range Settings() {
		if s.Kind != reflect.String {
			if s.Enum != nil {
				t.Errorf("%s: enum on a %v setting", s.Name, s.Kind)
			}
			continue
		}
		n++
		if len(s.Enum) == 0 || s.CheckEnum(s.Default.(string)) != nil {
			t.Errorf("%s: default %v, enum %v", s.Name, s.Default, s.Enum)
		}
		for _, v := range s.Enum {
			c := DefaultConfig()
			*c.Value(s).(*string) = v
			if err := c.Validate(); err != nil {
				t.Errorf("%s %q refused: %v", s.Name, v, err)
			}
			var d Config
			if err := json.Unmarshal([]byte(`{"`+s.Name+`":"`+v+`"}`), &d); err != nil || d != c {
				t.Errorf("%s %q from JSON: %+v, %v", s.Name, v, d, err)
			}
		}
		want := "augment: " + s.Name + ` "Flip": want one of ` + strings.Join(s.Enum, ", ")
		c := DefaultConfig()
		*c.Value(s).(*string) = "Flip"
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("Validate: %v, want %s", err, want)
		}
		var d Config
		if err := json.Unmarshal([]byte(`{"`+s.Name+`":"Flip"}`), &d); err == nil || err.Error() != want {
			t.Errorf("JSON: %v, want %s", err, want)
		}
		if err := json.Unmarshal([]byte(`{"`+s.Name+`":1}`), &d); err == nil || !strings.Contains(err.Error(), s.Name) {
			t.Errorf("JSON number: %v, want the setting named", err)
		}
	}
	if n == 0 {
		t.Error("no string setting in the table")
	}
}
