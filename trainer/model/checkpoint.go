package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// Metadata keys a checkpoint carries in its safetensors "__metadata__".
const (
	MetaVariant = "variant"
	MetaClasses = "classes"
	MetaImgsz   = "imgsz"
	MetaStep    = "step"
	MetaConfig  = "config"
	MetaFormat  = "format" // "pt", so Python readers treat it as PyTorch tensors
	MetaGraph   = "graph"  // "train", "fused", "deployed" or "deployed+fused"
)

// Meta is the checkpoint description stored beside the tensors.
type Meta struct {
	Variant string
	Classes int
	Imgsz   int
	Step    int64
	// Config is free-form JSON (the training configuration); empty means {}.
	Config json.RawMessage
	// Graph is the model form the checkpoint holds (see Model.Graph); set
	// by SaveCheckpoint from the model.
	Graph string
}

// Graph names the model form: "train", "fused", "deployed" or
// "deployed+fused". Checkpoints record it so they load into the same form.
func (m *Model) Graph() string {
	switch {
	case m.Deployed && m.Fused:
		return "deployed+fused"
	case m.Deployed:
		return "deployed"
	case m.Fused:
		return "fused"
	}
	return "train"
}

// LoadError lists every problem a strict load found.
type LoadError struct {
	Missing    []string // keys the model has and the file lacks
	Unexpected []string // keys the file has and the model lacks
	Mismatched []string // "key: file [a b], model [c d]" (shape or dtype)
	// Hint explains a whole-file mismatch, such as another scale.
	Hint string
}

// Error names the scale hint, then every missing, unexpected and
// mismatched key.
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("model: checkpoint does not match the model")
	if e.Hint != "" {
		b.WriteString(": " + e.Hint)
	}
	list := func(title string, ks []string) {
		if len(ks) == 0 {
			return
		}
		fmt.Fprintf(&b, "; %d %s: %s", len(ks), title, strings.Join(ks, ", "))
	}
	list("missing keys", e.Missing)
	list("unexpected keys", e.Unexpected)
	list("shape mismatches", e.Mismatched)
	return b.String()
}

// StateDict encodes every parameter and running statistic as F32 and every
// num_batches_tracked counter as an I64 scalar, under the reference keys.
func (m *Model) StateDict() (*safetensors.File, error) {
	if !m.HasWeights() {
		return nil, ErrNoWeights
	}
	f := safetensors.New()
	for _, p := range m.State() {
		t, err := safetensors.FromFloat32(safetensors.F32, p.Shape, p.Value.ToHost(nil))
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", p.Name, err)
		}
		f.Tensors[p.Name] = t
	}
	for _, nb := range m.BatchNorms() {
		t, _ := safetensors.FromInt64([]int{}, []int64{nb.BN.NumBatchesTracked})
		f.Tensors[nb.Prefix+".num_batches_tracked"] = t
	}
	return f, nil
}

// LoadOptions relaxes LoadState. The zero value is strict.
type LoadOptions struct {
	// AllowMissing keeps the current values of keys the file lacks.
	AllowMissing bool
	// AllowUnexpected ignores keys the model lacks.
	AllowUnexpected bool
}

// LoadState copies the tensors of f into the model by key. Float dtypes
// (F32, F16, BF16, F64) convert to float32; num_batches_tracked may be a
// scalar or a one-element vector. Unless opts relaxes it, missing keys,
// unexpected keys and shape mismatches are reported together in one
// *LoadError and the model is left unchanged.
func (m *Model) LoadState(f *safetensors.File, opts LoadOptions) error {
	if !m.HasWeights() {
		return ErrNoWeights
	}
	le := &LoadError{}
	want := map[string]bool{}
	params := m.State()
	for _, p := range params {
		want[p.Name] = true
	}
	bns := m.BatchNorms()
	for _, nb := range bns {
		want[nb.Prefix+".num_batches_tracked"] = true
	}
	for _, k := range f.Names() {
		if !want[k] {
			le.Unexpected = append(le.Unexpected, k)
		}
	}
	type job struct {
		dst *tensor.Tensor
		src safetensors.Tensor
	}
	var jobs []job
	for _, p := range params {
		t, ok := f.Tensors[p.Name]
		if !ok {
			le.Missing = append(le.Missing, p.Name)
			continue
		}
		if !slices.Equal(t.Shape, p.Shape) {
			le.Mismatched = append(le.Mismatched, fmt.Sprintf("%s: file %v, model %v", p.Name, t.Shape, p.Shape))
			continue
		}
		switch t.DType {
		case safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64:
		default:
			le.Mismatched = append(le.Mismatched, fmt.Sprintf("%s: dtype %s, want a float type", p.Name, t.DType))
			continue
		}
		jobs = append(jobs, job{p.Value, t})
	}
	counts := make([]int64, len(bns))
	haveCount := make([]bool, len(bns))
	for i, nb := range bns {
		k := nb.Prefix + ".num_batches_tracked"
		t, ok := f.Tensors[k]
		if !ok {
			le.Missing = append(le.Missing, k)
			continue
		}
		v, err := t.Int64s()
		if err != nil || len(v) != 1 || len(t.Shape) > 1 {
			le.Mismatched = append(le.Mismatched, fmt.Sprintf("%s: file %s %v, model int64 scalar", k, t.DType, t.Shape))
			continue
		}
		counts[i], haveCount[i] = v[0], true
	}
	if opts.AllowMissing {
		le.Missing = nil
	}
	if opts.AllowUnexpected {
		le.Unexpected = nil
	}
	if len(le.Missing)+len(le.Unexpected)+len(le.Mismatched) > 0 {
		le.Hint = m.scaleHint(f)
		return le
	}
	for _, j := range jobs {
		v, err := j.src.Float32s()
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		j.dst.FromHost(v)
	}
	for i, nb := range bns {
		if haveCount[i] {
			nb.BN.NumBatchesTracked = counts[i]
		}
	}
	return nil
}

// scaleHint names the family member a mismatching file belongs to, when
// its metadata says so or its shapes match another scale exactly.
func (m *Model) scaleHint(f *safetensors.File) string {
	if v := f.Metadata[MetaVariant]; v != "" && v != m.Config.Variant {
		return fmt.Sprintf("the checkpoint is variant %q, the model is variant %q", v, m.Config.Variant)
	}
	classes := 0
	if t, ok := f.Tensors["model.23.one2one_cv3.0.2.weight"]; ok && len(t.Shape) == 4 {
		classes = t.Shape[0]
	}
	for _, s := range Scales {
		if classes < 1 {
			break
		}
		d, err := Describe(Config{Variant: s.Name, Classes: classes})
		if err != nil || (d.Config == m.Config) {
			continue
		}
		match := true
		for _, p := range d.State() {
			t, ok := f.Tensors[p.Name]
			if !ok || !slices.Equal(t.Shape, p.Shape) {
				match = false
				break
			}
		}
		if match {
			if s.Name != m.Config.Variant {
				return fmt.Sprintf("the checkpoint's shapes are those of variant %q, the model is variant %q", s.Name, m.Config.Variant)
			}
			if classes != m.Config.Classes {
				return fmt.Sprintf("the checkpoint has %d classes, the model %d", classes, m.Config.Classes)
			}
		}
	}
	return ""
}

// SaveCheckpoint writes the model state and meta to path (atomically).
// meta.Variant and meta.Classes are taken from the model.
func (m *Model) SaveCheckpoint(path string, meta Meta) error {
	f, err := m.StateDict()
	if err != nil {
		return err
	}
	cfg := meta.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	if !json.Valid(cfg) {
		return fmt.Errorf("model: checkpoint %s: config is not valid JSON", path)
	}
	f.Metadata = map[string]string{
		MetaFormat:  "pt",
		MetaVariant: m.Config.Variant,
		MetaClasses: strconv.Itoa(m.Config.Classes),
		MetaImgsz:   strconv.Itoa(meta.Imgsz),
		MetaStep:    strconv.FormatInt(meta.Step, 10),
		MetaConfig:  string(cfg),
		MetaGraph:   m.Graph(),
	}
	if err := safetensors.WriteFile(path, f); err != nil {
		return fmt.Errorf("model: saving checkpoint: %w", err)
	}
	return nil
}

// ReadMeta decodes a checkpoint's metadata.
func ReadMeta(f *safetensors.File) (Meta, error) {
	md := f.Metadata
	if md == nil || md[MetaVariant] == "" {
		return Meta{}, errors.New("model: file has no checkpoint metadata (variant)")
	}
	var meta Meta
	var err error
	meta.Variant = md[MetaVariant]
	if meta.Classes, err = strconv.Atoi(md[MetaClasses]); err != nil {
		return Meta{}, fmt.Errorf("model: checkpoint metadata classes %q: %w", md[MetaClasses], err)
	}
	if s := md[MetaImgsz]; s != "" {
		if meta.Imgsz, err = strconv.Atoi(s); err != nil {
			return Meta{}, fmt.Errorf("model: checkpoint metadata imgsz %q: %w", s, err)
		}
	}
	if s := md[MetaStep]; s != "" {
		if meta.Step, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Meta{}, fmt.Errorf("model: checkpoint metadata step %q: %w", s, err)
		}
	}
	meta.Graph = md[MetaGraph]
	switch meta.Graph {
	case "":
		meta.Graph = "train"
	case "train", "fused", "deployed", "deployed+fused":
	default:
		return Meta{}, fmt.Errorf("model: checkpoint metadata graph %q: want train, fused, deployed or deployed+fused", meta.Graph)
	}
	if s := md[MetaConfig]; s != "" {
		if !json.Valid([]byte(s)) {
			return Meta{}, errors.New("model: checkpoint metadata config is not valid JSON")
		}
		meta.Config = json.RawMessage(s)
	}
	return meta, nil
}

// LoadCheckpoint reads path strictly into m. A checkpoint of another
// variant or class count is refused with an error saying so.
func (m *Model) LoadCheckpoint(path string) (Meta, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return Meta{}, fmt.Errorf("model: %w", err)
	}
	meta, err := ReadMeta(f)
	if err != nil {
		return Meta{}, fmt.Errorf("%s: %w", path, err)
	}
	if meta.Variant != m.Config.Variant {
		return meta, fmt.Errorf("model: checkpoint %s is variant %q (%d classes); the model is variant %q: build the model with --variant %s",
			path, meta.Variant, meta.Classes, m.Config.Variant, meta.Variant)
	}
	if meta.Classes != m.Config.Classes {
		return meta, fmt.Errorf("model: checkpoint %s has %d classes; the model has %d", path, meta.Classes, m.Config.Classes)
	}
	if meta.Graph != m.Graph() {
		return meta, fmt.Errorf("model: checkpoint %s holds the %s graph; the model is the %s graph", path, meta.Graph, m.Graph())
	}
	if err := m.LoadState(f, LoadOptions{}); err != nil {
		return meta, fmt.Errorf("%s: %w", path, err)
	}
	return meta, nil
}

// OpenCheckpoint builds the model a checkpoint describes (variant, class
// count and graph) and loads it strictly.
func OpenCheckpoint(path string) (*Model, Meta, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("model: %w", err)
	}
	meta, err := ReadMeta(f)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("%s: %w", path, err)
	}
	m, err := New(Config{Variant: meta.Variant, Classes: meta.Classes})
	if err != nil {
		return nil, meta, fmt.Errorf("%s: %w", path, err)
	}
	switch meta.Graph {
	case "deployed", "deployed+fused":
		m, err = m.Deploy(meta.Graph == "deployed+fused")
	case "fused":
		m, err = m.Fuse()
	}
	if err != nil {
		return nil, meta, fmt.Errorf("%s: %w", path, err)
	}
	if err := m.LoadState(f, LoadOptions{}); err != nil {
		return nil, meta, fmt.Errorf("%s: %w", path, err)
	}
	return m, meta, nil
}
