package model

import (
	"fmt"
	"math"
)

// Scale holds the compound-scaling constants of one family member.
type Scale struct {
	Name     string  // "n", "s", "m", "l" or "x"
	Depth    float64 // multiplies yaml repeats greater than one
	Width    float64 // multiplies yaml channel counts
	MaxCh    int     // caps yaml channel counts before Width applies
	ForceC3k bool    // every C3k2 uses C3k blocks (m, l, x)
}

// Scales lists the family in size order.
var Scales = []Scale{
	{Name: "n", Depth: 0.50, Width: 0.25, MaxCh: 1024},
	{Name: "s", Depth: 0.50, Width: 0.50, MaxCh: 1024},
	{Name: "m", Depth: 0.50, Width: 1.00, MaxCh: 512, ForceC3k: true},
	{Name: "l", Depth: 1.00, Width: 1.00, MaxCh: 512, ForceC3k: true},
	{Name: "x", Depth: 1.00, Width: 1.50, MaxCh: 512, ForceC3k: true},
}

// LookupScale returns the named scale.
func LookupScale(name string) (Scale, error) {
	for _, s := range Scales {
		if s.Name == name {
			return s, nil
		}
	}
	return Scale{}, fmt.Errorf("model: unknown variant %q (want n, s, m, l or x)", name)
}

// channels applies the width rule: ceil(min(c, maxCh)·width / 8)·8.
func (s Scale) channels(c int) int {
	return int(math.Ceil(float64(min(c, s.MaxCh))*s.Width/8)) * 8
}

// repeats applies the depth rule to a yaml repeat count.
func (s Scale) repeats(n int) int {
	if n <= 1 {
		return n
	}
	return max(int(math.RoundToEven(float64(n)*s.Depth)), 1)
}

// Config selects a family member. The zero Classes means 80 (COCO).
type Config struct {
	Variant string `json:"variant"` // n, s, m, l or x
	Classes int    `json:"classes"` // number of classes; 0 means 80
	// Seed drives the deterministic weight initialisation of New.
	Seed uint64 `json:"seed"`
}

// Constants of the family that do not vary by scale.
const (
	NumMasks       = 32   // prototypes / mask coefficients per anchor
	BNEps          = 1e-3 // BatchNorm epsilon after the reference init pass
	BNMomentum     = 0.03 // running = (1 − m)·running + m·batch
	DefaultClasses = 80
)

// Strides of the three detection levels P3, P4, P5.
var Strides = [3]int{8, 16, 32}

func (c Config) normalised() (Config, Scale, error) {
	if c.Classes == 0 {
		c.Classes = DefaultClasses
	}
	if c.Classes < 1 {
		return c, Scale{}, fmt.Errorf("model: %d classes: want at least 1", c.Classes)
	}
	s, err := LookupScale(c.Variant)
	return c, s, err
}
