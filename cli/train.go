package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/train"
)

// trainFlagUsage documents the flags derived from train.Config keys
// (flag name = key with '-' for '_'); the augmentation settings' flags are
// the table's (augmentFlags).
var trainFlagUsage = map[string]string{
	"variant":         "model scale n, s, m, l or x",
	"classes":         "class count (0: from the shards' categories)",
	"epochs":          "training epochs",
	"batch":           "images per batch (gradients accumulate to --nbs)",
	"imgsz":           "square input side in pixels (multiple of 32)",
	"device":          "backend: cpu (the reference), emu (the CPU kernels behind an emulated device boundary, every transfer counted; same numbers as cpu) or cuda (GPU 0 through the run-time CUDA binding)",
	"precision":       "math on cuda: tf32 (default, PyTorch's: TF32 convolutions, fp32 GEMMs) or fp32 (strict, to compare with the CPU); SEGPIPE_TF32=1|0 overrides it",
	"seed":            "model-initialisation, shuffle and augmentation seed",
	"workers":         "loader goroutines (0: GOMAXPROCS)",
	"weights":         "initial weights: a checkpoint of the same variant and class count (default: random init)",
	"optimizer":       "auto (MuSGD, reference lr), musgd, sgd or adamw",
	"lr0":             "initial learning rate (ignored by auto)",
	"lrf":             "final learning rate as a fraction of lr0",
	"momentum":        "SGD momentum / Adam beta1",
	"weight-decay":    "weight decay (scaled by batch·accumulate/nbs)",
	"warmup-epochs":   "warmup epochs (at least 100 iterations; 0: none)",
	"warmup-momentum": "momentum at the start of warmup",
	"warmup-bias-lr":  "bias learning rate at the start of warmup (0 under auto)",
	"nbs":             "nominal batch: optimiser step every round(nbs/batch) batches",
	"clip-norm":       "global gradient-norm clip",
	"ema-tau":         "EMA ramp (decay 0.9999·(1−exp(−updates/tau)))",
	"close-mosaic":    "turn mosaic off for the last N epochs",
	"conf":            "validation score threshold",
	"max-det":         "validation detections per image",
	"val-every":       "validate every N epochs and after the last (0: every epoch)",
	"save-every":      "also save the resumable state every N iterations inside an epoch (0: epoch ends and Ctrl-C only)",
}

func flagOf(key string) string { return strings.ReplaceAll(key, "_", "-") }

// valueKind names what a config key takes, for --help: the flags are read
// as text and parsed by Config.Set (so that a flag overrides --config
// exactly as the file's value would), and without this every one would
// show as "string".
func valueKind(cfg train.Config, key string) string {
	t := reflect.TypeOf(cfg)
	for i := range t.NumField() {
		f := t.Field(i)
		if strings.Split(f.Tag.Get("json"), ",")[0] != key {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int32, reflect.Int64:
			return " (an integer `N`)"
		case reflect.Float32, reflect.Float64:
			return " (a number `X`)"
		case reflect.Bool:
			return " (`true|false`)"
		}
	}
	return ""
}

func trainCommand() *ucli.Command {
	def := train.DefaultConfig()
	defJSON := configStrings(def)
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "shards", Usage: "training shard `DIR` (with manifest.json)"},
		&ucli.StringFlag{Name: "val-shards", Usage: "validation shard `DIR` (default: validate on the training shards)"},
		&ucli.StringFlag{Name: "out", Usage: "run `DIR` (config.json, results.csv/png, last/best/state.safetensors)"},
		&ucli.StringFlag{Name: "config", Usage: "JSON config `FILE` (keys as the flags, '_' for '-'); flags override it"},
		&ucli.StringFlag{Name: "resume", Usage: "continue the run in `RUN_DIR` exactly where it stopped (an epoch end, Ctrl-C or --save-every)"},
		&ucli.StringFlag{Name: "remote", Usage: "take batches from the segpipe server at `HOST:PORT`, or a fleet: HOST:PORT,HOST:PORT,... or one NAME:PORT resolving to several (ranks spread over them, failing over when one goes away); --shards and --val-shards then name shard sets below its root"},
		&ucli.StringFlag{Name: "remote-token", Usage: "bearer `TOKEN` for --remote", Sources: ucli.EnvVars("SEGPIPE_TOKEN")},
		&ucli.StringFlag{Name: "remote-ca", Usage: "connect to --remote over TLS, trusting the CA certificates in `FILE` (PEM)"},
		&ucli.BoolFlag{Name: "remote-tls", Usage: "connect to --remote over TLS with the system's CA certificates"},
		maxMemoryFlag(),
	}
	for _, k := range train.Keys() {
		if _, ok := augment.Lookup(k); !ok {
			f := flagOf(k)
			flags = append(flags, &ucli.StringFlag{Name: f, Value: defJSON[k], Usage: trainFlagUsage[f] + valueKind(def, k)})
		}
	}
	flags = append(flags, augmentFlags()...)
	return &ucli.Command{
		Name:      "train",
		Usage:     "train a YOLO26-seg model on shards (CPU, or a GPU with --device cuda)",
		UsageText: "segpipe train --shards DIR [--val-shards DIR] --variant n|s|m|l|x --epochs E --batch B --imgsz S --device cpu|emu|cuda --out RUN_DIR [--config FILE] [--remote HOST:PORT]\nsegpipe train --resume RUN_DIR [--device cpu|emu|cuda]",
		Description: "Trains with the reference recipe: MuSGD (optimizer auto), warmup and linear lr decay,\n" +
			"accumulation to the nominal batch 64, clipping at norm 10, EMA, ProgLoss. Every epoch\n" +
			"validates the EMA model (box and mask mAP on the prototype grid) and writes\n" +
			"results.csv, results.png, last.safetensors and best.safetensors into --out.\n" +
			"Settings: defaults < --config file < flags; the effective configuration is written to\n" +
			"RUN_DIR/config.json and into every checkpoint. --resume takes everything from the run\n" +
			"but --device, which moves it to another device (checkpoints have one format on all).\n" +
			"Ctrl-C saves the run between two batches; --resume continues from the next batch.\n" +
			"With --remote the batches come from `segpipe serve` on another machine (windowed\n" +
			"masks on the wire); the run directory and the model stay here.\n" +
			"With --remote and --device cuda the masks stay windowed up to the GPU, which expands them.\n\n" +
			"Examples:\n  segpipe train --shards shards/train --config trainer/configs/smoke.json --out runs/smoke\n" +
			"  segpipe train --shards shards/train --variant n --epochs 100 --batch 8 --imgsz 640 --out runs/n\n" +
			"  segpipe train --remote loader-host:8815 --shards coco/train --config trainer/configs/long.json --out runs/long\n" +
			"  segpipe train --resume runs/n\n" +
			"  segpipe train --resume runs/n --device cuda   # continue a CPU run on the GPU",
		Flags: flags,
		Action: func(ctx context.Context, c *ucli.Command) error {
			return runTrain(ctx, c)
		},
	}
}

// configStrings renders a config's values as flag defaults.
func configStrings(cfg train.Config) map[string]string {
	out := map[string]string{}
	for _, k := range train.Keys() {
		out[k] = ""
	}
	b, _ := json.Marshal(cfg)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for k, v := range m {
		switch x := v.(type) {
		case string:
			out[k] = x
		case float64:
			out[k] = strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	return out
}

func runTrain(ctx context.Context, c *ucli.Command) error {
	// Ctrl-C stops at the next batch; the last completed epoch stays
	// resumable (every run file is written atomically at epoch ends).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv := train.Invocation{Resume: c.String("resume"), ConfigFile: c.String("config"), Out: c.String("out"),
		Settings: map[string]string{}}
	for _, k := range append(train.Keys(), "shards", "val_shards", "remote") {
		if f := flagOf(k); c.IsSet(f) {
			// As text, which Config.Set parses as a config file's value:
			// an augmentation flag is typed (augmentFlags), and %v
			// writes a float64 so that it parses back to itself.
			inv.Settings[k] = fmt.Sprint(c.Value(f))
		}
	}
	r, err := train.Resolve(inv)
	if _, ok := errors.AsType[*train.UsageError](err); ok {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	stderr := c.Root().ErrWriter
	opt := r.Options
	opt.NewProgress = func(what string, total int) train.Progress {
		return &trainProgress{p: newProgress(stderr, what, int64(total), 0)}
	}
	if r.Remote != "" {
		// remoteClient reads the address from --remote; a resumed run's
		// comes from its run directory.
		c.Set("remote", r.Remote)
		cl, err := remoteClient(c)
		if err != nil {
			return err
		}
		defer cl.Close()
		// A device that expands windowed masks itself gets the training
		// batches windowed; elsewhere the stream expands them.
		windowed := train.ExpandsWindows(opt.Backend)
		if opt.Train, opt.Categories, err = remoteData(ctx, cl, r.Shards, windowed); err != nil {
			return err
		}
		if r.ValShards != "" {
			if opt.Val, _, err = remoteData(ctx, cl, r.ValShards, windowed); err != nil {
				return err
			}
		}
	} else {
		src, err := openShards(ctx, "--shards", r.Shards)
		if err != nil {
			return err
		}
		defer src.Close()
		// The model and the training and validation loaders share the
		// budget: each loader is judged beside the model's estimate and
		// the loaders already open.
		budget, err := memoryBudget(c)
		if err != nil {
			return err
		}
		classes := opt.Config.Classes
		if classes == 0 {
			classes = len(src.Manifest().Categories)
		}
		modelBytes, err := train.HostMemory(opt.Config, opt.Backend, classes)
		if err != nil {
			return err
		}
		slog.Info("memory estimate", "model", opt.Config.Variant, "estimate_bytes", modelBytes,
			"batch", opt.Config.Batch, "imgsz", opt.Config.Imgsz, "budget_bytes", budget)
		lb := &loaderBudget{max: budget, live: modelBytes}
		td := budgetedData{train.Local(src), src, "train", lb}
		vd := td // validation on the training data
		opt.Train, opt.Categories = td, src.Manifest().Categories
		if v := r.ValShards; v != "" {
			vs, err := openShards(ctx, "--val-shards", v)
			if err != nil {
				return err
			}
			defer vs.Close()
			vd = budgetedData{train.Local(vs), vs, "val", lb}
			opt.Val = vd
		}
		if err := checkRun(td, opt.Config.TrainLoader(order.State{}), vd, opt.Config.ValConfig().Loader()); err != nil {
			return err
		}
		// Paths on the command line are relative to where it ran; the
		// run's config holds them absolute, so a resume runs anywhere.
		opt.Config.Shards, opt.Config.ValShards = absPath(r.Shards), absPath(r.ValShards)
	}
	opt.Config.Weights = absPath(opt.Config.Weights)
	sum, err := train.Run(ctx, opt)
	if sum != nil && sum.Skips != nil {
		sum.Skips.Print(c.Root().Writer)
	}
	if errors.Is(err, train.ErrInterrupted) {
		fmt.Fprintf(c.Root().Writer, "stopped between two batches; the run is saved: continue with\n  segpipe train --resume %s\n", opt.Out)
		return err
	}
	if err != nil {
		return err
	}
	w := c.Root().Writer
	if n := len(sum.Epochs); n > 0 {
		e := sum.Epochs[n-1]
		fmt.Fprintf(w, "trained %d epochs in %.1fs; last epoch: box mAP50 %.3f mAP50-95 %.3f, mask mAP50 %.3f mAP50-95 %.3f\n",
			n, sum.Wall.Seconds(), e.BoxMAP50, e.BoxMAP, e.MaskMAP50, e.MaskMAP)
	}
	fmt.Fprintf(w, "run directory %s: %s, %s, %s, %s\n", opt.Out, train.ResultsFile, train.PlotFile, train.LastFile, train.BestFile)
	return nil
}

func absPath(p string) string {
	if p == "" || isURL(p) {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

type trainProgress struct{ p *progress }

func (t *trainProgress) Add(n int) { t.p.add(n, 0) }
func (t *trainProgress) Finish()   { t.p.finish() }
