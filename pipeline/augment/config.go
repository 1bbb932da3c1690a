package augment

import (
	"fmt"
	"math"
)

// Config holds the augmentation hyper-parameters. Start from DefaultConfig:
// several zero values (Mosaic, FlipLR, the HSV gains) mean "off".
type Config struct {
	ImgSz int // output canvas side s (square), default 640

	Mosaic      float64 // probability of a 4-image mosaic, default 1.0
	Degrees     float64 // rotation range ±degrees, default 0
	Translate   float64 // translation fraction ±, default 0.1
	Scale       float64 // scale gain: factor uniform in [1-Scale, 1+Scale], default 0.5
	Shear       float64 // shear range ±degrees, default 0
	Perspective float64 // perspective range ±, default 0
	HSVH        float64 // hue gain, default 0.015
	HSVS        float64 // saturation gain, default 0.7
	HSVV        float64 // value gain, default 0.4
	FlipLR      float64 // horizontal flip probability, default 0.5
	Fill        uint8   // padding value, default 114

	// Candidate rule (see package doc).
	MinSide   float64 // default 2 px
	MinArea   float64 // kept area / area before clipping, default 0.01
	MaxAspect float64 // default 100

	// KeepCrowd keeps iscrowd instances (rasterised from their RLE or
	// polygons, flagged in the batch's iscrowd column) instead of dropping
	// them as YOLO training does; validation sets it. Default false.
	KeepCrowd bool
}

// DefaultConfig returns the widely used YOLO defaults.
func DefaultConfig() Config {
	return Config{
		ImgSz: 640, Mosaic: 1, Translate: 0.1, Scale: 0.5,
		HSVH: 0.015, HSVS: 0.7, HSVV: 0.4, FlipLR: 0.5, Fill: 114,
		MinSide: 2, MinArea: 0.01, MaxAspect: 100,
	}
}

// Validate reports a configuration that cannot be used.
func (c Config) Validate() error {
	if c.ImgSz <= 0 || c.ImgSz > 1<<14 {
		return fmt.Errorf("augment: imgsz %d out of range (1..16384)", c.ImgSz)
	}
	for _, f := range []struct {
		name   string
		v, max float64
	}{
		{"mosaic", c.Mosaic, 1}, {"fliplr", c.FlipLR, 1}, {"scale", c.Scale, 0.99},
		{"translate", c.Translate, 1}, {"degrees", c.Degrees, 180}, {"shear", c.Shear, 89},
		{"perspective", c.Perspective, 0.01}, {"hsv_h", c.HSVH, 1}, {"hsv_s", c.HSVS, 1}, {"hsv_v", c.HSVV, 1},
		{"min_area", c.MinArea, 1}, {"min_side", c.MinSide, math.Inf(1)}, {"max_aspect", c.MaxAspect, math.Inf(1)},
	} {
		if !(f.v >= 0 && f.v <= f.max) {
			return fmt.Errorf("augment: %s %v out of range [0, %v]", f.name, f.v, f.max)
		}
	}
	return nil
}
