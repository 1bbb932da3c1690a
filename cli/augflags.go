package cli

import (
	"fmt"
	"reflect"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// augmentFlags are the flags of the augmentation settings, one per row of
// the table (augment.Settings): named as the setting with '-' for '_',
// typed as it, with its default and usage. Every command that builds or
// trains on batches takes them, so a setting added to the table is a flag
// of each with no change here.
func augmentFlags() []ucli.Flag {
	var out []ucli.Flag
	for _, s := range augment.Settings() {
		name := flagOf(s.Name)
		switch d := s.Default.(type) {
		case float64:
			out = append(out, &ucli.FloatFlag{Name: name, Value: d, Usage: s.Usage})
		case uint8:
			out = append(out, &ucli.Uint8Flag{Name: name, Value: d, Usage: s.Usage})
		case bool:
			out = append(out, &ucli.BoolFlag{Name: name, Value: d, Usage: s.Usage})
		case string:
			// The values in the usage, and a value outside them refused
			// while the command line is parsed, naming the ones it takes.
			out = append(out, &ucli.StringFlag{Name: name, Value: d, Usage: s.Usage + " (" + strings.Join(s.Enum, "|") + ")",
				Validator: func(v string) error { return s.CheckEnum(v) }})
		default:
			// augment's tests hold the table to these four kinds.
			panic(fmt.Sprintf("augmentFlags: setting %s of type %T", s.Name, s.Default))
		}
	}
	return out
}

// readAugment sets a's settings whose flags (augmentFlags) were given; the
// others keep a's values.
func readAugment(c *ucli.Command, a *augment.Config) {
	for _, s := range augment.Settings() {
		if f := flagOf(s.Name); c.IsSet(f) {
			reflect.ValueOf(a.Value(s)).Elem().Set(reflect.ValueOf(c.Value(f)))
		}
	}
}
