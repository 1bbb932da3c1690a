package cli

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/trainer/train"
)

// Every command that builds or trains on batches has a flag for every
// setting of the augmentation table, typed and defaulted as the table says.
func TestEveryCommandHasEveryAugmentFlag(t *testing.T) {
	root := newRoot(io.Discard, io.Discard)
	for _, name := range []string{"bench", "dump", "preview", "train"} {
		cmd := root.Command(name)
		if cmd == nil {
			t.Fatalf("no command %s", name)
		}
		flags := map[string]ucli.Flag{}
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				if _, dup := flags[n]; dup {
					t.Errorf("%s: flag --%s twice", name, n)
				}
				flags[n] = f
			}
		}
		for _, s := range augment.Settings() {
			f, ok := flags[flagOf(s.Name)]
			if !ok {
				t.Errorf("%s lacks --%s", name, flagOf(s.Name))
				continue
			}
			if got := f.Get(); got != s.Default {
				t.Errorf("%s --%s: default %T %v, the table's %T %v", name, flagOf(s.Name), got, got, s.Default, s.Default)
			}
		}
	}
}

// nonDefaultArgs gives every setting a value other than its default, on
// the command line, and returns the config that should result.
func nonDefaultArgs() ([]string, augment.Config) {
	want := augment.DefaultConfig()
	var args []string
	for _, s := range augment.Settings() {
		var v any
		switch d := s.Default.(type) {
		case float64:
			v = min(d/2+0.125, s.Max)
		case uint8:
			v = d ^ 1
		case bool:
			v = !d
		case string:
			v = s.Enum[(slices.Index(s.Enum, d)+1)%len(s.Enum)]
		}
		reflect.ValueOf(want.Value(s)).Elem().Set(reflect.ValueOf(v))
		args = append(args, fmt.Sprintf("--%s=%v", flagOf(s.Name), v))
	}
	return args, want
}

// readAugment reads every flag given into its setting and leaves the
// others as they were; the text `segpipe train` hands Config.Set reads
// back to the same value.
func TestReadAugment(t *testing.T) {
	args, want := nonDefaultArgs()
	for _, tc := range []struct {
		name string
		args []string
		want augment.Config
	}{
		{"none", nil, augment.DefaultConfig()},
		{"all", args, want},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got augment.Config
			viaTrain := train.DefaultConfig()
			cmd := &ucli.Command{Name: "x", Flags: augmentFlags(), Action: func(_ context.Context, c *ucli.Command) error {
				got = augment.DefaultConfig()
				readAugment(c, &got)
				for _, s := range augment.Settings() {
					if f := flagOf(s.Name); c.IsSet(f) {
						if err := viaTrain.Set(s.Name, fmt.Sprint(c.Value(f))); err != nil {
							return err
						}
					}
				}
				return nil
			}}
			if err := cmd.Run(context.Background(), append([]string{"x"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("readAugment\n%+v\nwant\n%+v", got, tc.want)
			}
			viaTrain.Imgsz = tc.want.ImgSz
			if a := viaTrain.Augment(); a != tc.want {
				t.Errorf("through train.Config.Set\n%+v\nwant\n%+v", a, tc.want)
			}
		})
	}
}

// A string setting's flag takes the values of its enum only, and a bad one
// is refused before the command runs, naming the setting and its values.
func TestEnumFlagRefusesOtherValues(t *testing.T) {
	for _, s := range augment.Settings() {
		if s.Enum == nil {
			continue
		}
		for _, tc := range []struct {
			val string
			ok  bool
		}{{s.Enum[len(s.Enum)-1], true}, {"nope", false}, {"", false}} {
			ran := false
			cmd := &ucli.Command{Name: "x", Flags: augmentFlags(), Action: func(context.Context, *ucli.Command) error { ran = true; return nil }}
			cmd.Writer, cmd.ErrWriter = io.Discard, io.Discard
			err := cmd.Run(context.Background(), []string{"x", "--" + flagOf(s.Name) + "=" + tc.val})
			if tc.ok != (err == nil) || ran != tc.ok {
				t.Errorf("--%s=%q: ran %v, err %v", flagOf(s.Name), tc.val, ran, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), s.Name) || !strings.Contains(err.Error(), strings.Join(s.Enum, ", "))) {
				t.Errorf("--%s=%q: error %v, want the setting and its values named", flagOf(s.Name), tc.val, err)
			}
		}
	}
}
