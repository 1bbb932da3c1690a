package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/segpipe/segpipe/trainer/device"
)

// Invocation is a training run as asked for, before anything is read or
// opened: `segpipe train`'s flags, or a program's equivalent. Resolve
// turns it into the run's options.
type Invocation struct {
	// Resume is the run directory to continue; empty for a fresh run.
	Resume string
	// Base is a fresh run's starting configuration; nil is DefaultConfig.
	Base *Config
	// ConfigFile is a JSON config read over Base (a fresh run's only).
	ConfigFile string
	// Settings are settings given one by one, as text, by key: the keys of
	// Keys, which override ConfigFile, and "shards", "val_shards" and
	// "remote", which locate the data. A resumed run takes only the data
	// keys, "device" (the device it continues on) and "workers".
	Settings map[string]string
	// Out is a fresh run's directory.
	Out string
}

// Resolved is a run ready to start: Run's options but the data, and where
// the data is.
type Resolved struct {
	// Options has Config, Out, Resume, Device and Backend set; the caller
	// adds the data (Train, Val, Categories) and what it displays.
	Options Options
	// Shards and ValShards locate the training and validation data (empty
	// ValShards: validate on the training data): shard directories or URLs,
	// or shard sets below Remote's root when Remote is set.
	Shards, ValShards, Remote string
}

// UsageError is an error in how a run was asked for (a setting out of
// range, a missing or contradicting setting), as opposed to one met while
// reading a run directory or opening a device.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// Flag is the command-line spelling of a key: --key with '-' for '_'.
func Flag(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

// dataKeys are the settings that locate the data rather than configure
// the run.
var dataKeys = []string{"shards", "val_shards", "remote"}

// Resolve settles a run's configuration and opens its device, once: the
// backend is in the returned Options, so Run trains on it, and a caller
// asks it what the data should look like (ExpandsWindows) before opening
// the data.
//
// A fresh run's configuration is, in increasing precedence, Base, the
// ConfigFile and the Settings; the result must be valid and have an Out.
// A resumed run takes everything from its run directory but the data
// locations and the device, which Settings may change; any other setting
// is an error, since it would silently differ from the run's own. The
// data is the "shards" setting, else the config's (a fresh run's file, or
// the run directory's), and likewise for "val_shards" and, on resume,
// "remote". Errors in the invocation itself are UsageErrors.
func Resolve(inv Invocation) (Resolved, error) {
	keys := Keys()
	for k := range inv.Settings {
		if !slices.Contains(keys, k) && !slices.Contains(dataKeys, k) {
			return Resolved{}, usagef("config: unknown key %q (known: %s)", k, strings.Join(slices.Concat(keys, dataKeys), ", "))
		}
	}
	var r Resolved
	var cfg Config
	if inv.Resume != "" {
		set := func(k string) bool {
			switch k {
			case "config":
				return inv.ConfigFile != ""
			case "out":
				return inv.Out != ""
			}
			_, ok := inv.Settings[k]
			return ok
		}
		for _, k := range slices.Concat(keys, []string{"config", "out"}) {
			if k != "workers" && k != "device" && k != "precision" && set(k) {
				return Resolved{}, usagef("--resume continues the run's own configuration; %s cannot change it", Flag(k))
			}
		}
		rm, err := readRunMeta(inv.Resume)
		if err != nil {
			return Resolved{}, err
		}
		cfg = rm.Config
		r.Options.Out, r.Options.Resume = inv.Resume, true
		if dev, ok := inv.Settings["device"]; ok {
			// The one setting a resume may change: where it runs.
			r.Options.Device, cfg.Device = dev, dev
		}
	} else {
		cfg = DefaultConfig()
		if inv.Base != nil {
			cfg = *inv.Base
		}
		if inv.ConfigFile != "" {
			if err := cfg.LoadConfig(inv.ConfigFile); err != nil {
				return Resolved{}, &UsageError{err}
			}
		}
		for _, k := range keys {
			if v, ok := inv.Settings[k]; ok {
				if err := cfg.Set(k, v); err != nil {
					return Resolved{}, usagef("%s: %w", Flag(k), err)
				}
			}
		}
		if err := cfg.validateSettings(); err != nil {
			return Resolved{}, &UsageError{err}
		}
		cfg.Remote = "" // a fresh run's server is the remote setting alone
	}
	r.Shards, r.ValShards, r.Remote = cfg.Shards, cfg.ValShards, cfg.Remote
	if v, ok := inv.Settings["shards"]; ok {
		r.Shards = v
	}
	if v, ok := inv.Settings["val_shards"]; ok {
		r.ValShards = v
	}
	if v, ok := inv.Settings["remote"]; ok {
		r.Remote = v
	}
	if r.Options.Resume {
		// The run directory's settings, and the device a resume moves to:
		// Run checks them too, but the device is opened here.
		if err := cfg.validateSettings(); err != nil {
			return Resolved{}, err
		}
	}
	dev, err := device.OpenPrecision(cfg.Device, cfg.Precision)
	if err != nil {
		if !r.Options.Resume {
			// A fresh run names its device: one this host lacks is
			// a setting to change, as any other out of range.
			return Resolved{}, &UsageError{err}
		}
		return Resolved{}, err
	}
	if !r.Options.Resume && inv.Out == "" {
		return Resolved{}, usagef("--out RUN_DIR is required")
	}
	if r.Shards == "" {
		return Resolved{}, usagef("--shards DIR is required")
	}
	if !r.Options.Resume {
		r.Options.Out = inv.Out
	}
	cfg.Shards, cfg.ValShards, cfg.Remote = r.Shards, r.ValShards, r.Remote
	r.Options.Config, r.Options.Backend = cfg, dev
	return r, nil
}
