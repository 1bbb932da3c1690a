package train

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/device"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cfg.json")
	if err := os.WriteFile(file, []byte(`{"epochs": 5, "batch": 4, "shards": "from/file", "remote": "ignored:1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	saved := DefaultConfig()
	saved.Epochs, saved.Shards, saved.ValShards, saved.Remote = 3, "/data/train", "/data/val", "host:1"
	d := &runDir{path: run, cfg: saved}
	if err := d.mkdir(); err != nil {
		t.Fatal(err)
	}
	if err := d.writeConfig(); err != nil {
		t.Fatal(err)
	}
	base := DefaultConfig()
	base.Variant, base.Imgsz = "s", 128

	type want struct {
		cfg                       func(*Config)
		shards, valShards, remote string
		out, device, backend      string
		resume                    bool
	}
	for _, tc := range []struct {
		name  string
		inv   Invocation
		want  want
		usage string // a UsageError containing this
		err   string // another error containing this
	}{
		{name: "defaults", inv: Invocation{Out: "o", Settings: map[string]string{"shards": "s"}},
			want: want{shards: "s", out: "o", backend: "cpu"}},
		{name: "file under flags", inv: Invocation{Out: "o", ConfigFile: file, Settings: map[string]string{"epochs": "7", "device": "emu"}},
			want: want{cfg: func(c *Config) { c.Epochs, c.Batch, c.Device = 7, 4, "emu" }, shards: "from/file", out: "o", backend: "emu"}},
		{name: "flag shards over the file's, remote from the flag alone",
			inv:  Invocation{Out: "o", ConfigFile: file, Settings: map[string]string{"shards": "s", "val_shards": "v", "remote": "srv:2"}},
			want: want{cfg: func(c *Config) { c.Epochs, c.Batch = 5, 4 }, shards: "s", valShards: "v", remote: "srv:2", out: "o", backend: "cpu"}},
		{name: "base", inv: Invocation{Base: &base, Out: "o", Settings: map[string]string{"shards": "s"}},
			want: want{cfg: func(c *Config) { c.Variant, c.Imgsz = "s", 128 }, shards: "s", out: "o", backend: "cpu"}},
		{name: "no out", inv: Invocation{Settings: map[string]string{"shards": "s"}}, usage: "--out RUN_DIR is required"},
		{name: "no shards", inv: Invocation{Out: "o"}, usage: "--shards DIR is required"},
		{name: "bad value", inv: Invocation{Out: "o", Settings: map[string]string{"epochs": "many"}}, usage: `--epochs: config epochs="many"`},
		{name: "out of range", inv: Invocation{Out: "o", Settings: map[string]string{"epochs": "0"}}, usage: "config: epochs 0"},
		{name: "unknown key", inv: Invocation{Out: "o", Settings: map[string]string{"epoch": "1"}}, usage: `unknown key "epoch"`},
		{name: "missing file", inv: Invocation{Out: "o", ConfigFile: filepath.Join(dir, "nope.json")}, usage: "config:"},

		{name: "resume", inv: Invocation{Resume: run},
			want: want{cfg: func(c *Config) { *c = saved }, shards: "/data/train", valShards: "/data/val", remote: "host:1", out: run, resume: true, backend: "cpu"}},
		{name: "resume elsewhere", inv: Invocation{Resume: run, Settings: map[string]string{"device": "emu", "workers": "3", "shards": "t", "remote": ""}},
			want: want{cfg: func(c *Config) { *c = saved; c.Device = "emu" }, shards: "t", valShards: "/data/val", out: run, resume: true, device: "emu", backend: "emu"}},
		{name: "resume changes a setting", inv: Invocation{Resume: run, Settings: map[string]string{"epochs": "3"}}, usage: "--epochs cannot change it"},
		{name: "resume with a config file", inv: Invocation{Resume: run, ConfigFile: file}, usage: "--config cannot change it"},
		{name: "resume into another directory", inv: Invocation{Resume: run, Out: "o"}, usage: "--out cannot change it"},
		{name: "resume nothing", inv: Invocation{Resume: filepath.Join(dir, "nothing")}, err: "resume:"},
		{name: "resume on no device", inv: Invocation{Resume: run, Settings: map[string]string{"device": "tpu"}}, err: `device "tpu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Resolve(tc.inv)
			var ue *UsageError
			switch {
			case tc.usage != "":
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("err %v, want a UsageError containing %q", err, tc.usage)
				}
				return
			case tc.err != "":
				if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want an error (not a UsageError) containing %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			if tc.want.cfg != nil {
				tc.want.cfg(&cfg)
			}
			cfg.Shards, cfg.ValShards, cfg.Remote = tc.want.shards, tc.want.valShards, tc.want.remote
			o := r.Options
			if o.Config != cfg {
				t.Errorf("config\n%+v\nwant\n%+v", o.Config, cfg)
			}
			if r.Shards != tc.want.shards || r.ValShards != tc.want.valShards || r.Remote != tc.want.remote {
				t.Errorf("data %q %q %q, want %q %q %q", r.Shards, r.ValShards, r.Remote, tc.want.shards, tc.want.valShards, tc.want.remote)
			}
			if o.Out != tc.want.out || o.Resume != tc.want.resume || o.Device != tc.want.device {
				t.Errorf("out %q resume %v device %q, want %q %v %q", o.Out, o.Resume, o.Device, tc.want.out, tc.want.resume, tc.want.device)
			}
			if o.Backend == nil || o.Backend.Name() != tc.want.backend {
				t.Errorf("backend %v, want %s", o.Backend, tc.want.backend)
			}
		})
	}
}

// A fresh run names its device, so one this host cannot open is the
// invocation's mistake; Resolve opens it once, and Run trains on it.
func TestResolveCUDA(t *testing.T) {
	r, err := Resolve(Invocation{Out: "o", Settings: map[string]string{"shards": "s", "device": "cuda"}})
	if _, probe := device.Open("cuda"); probe != nil {
		var ue *UsageError
		if !errors.As(err, &ue) || !errors.Is(err, device.ErrUnavailable) {
			t.Fatalf("cuda without a GPU: %v, want a UsageError wrapping device.ErrUnavailable", err)
		}
		return
	}
	if err != nil || r.Options.Backend.Name() != "cuda" {
		t.Fatalf("cuda: %v", err)
	}
}
