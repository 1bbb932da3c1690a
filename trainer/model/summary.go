package model

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// LayerRow is one line of a summary.
type LayerRow struct {
	Index   int
	From    []int
	Repeats int
	Module  string
	Args    string
	Params  int64
	FLOPs   FLOPs // of this layer at the summary's image size, batch 1
}

// Summary describes a model: its layers and the totals of the whole family
// member (train graph, training-only parts, deployed forms) at one size.
type Summary struct {
	Config   Config
	Imgsz    int
	Deployed bool
	Fused    bool
	Layers   []LayerRow

	Params         int64 // of this model
	FullParams     int64 // train graph
	O2MParams      int64 // one-to-many branches
	AuxParams      int64 // semantic branch
	DeployedParams int64 // full − o2m − aux
	FusedParams    int64 // deployed with BN folded

	FLOPs         FLOPs // this model: train mode for a train graph, else eval
	TrainFLOPs    FLOPs // full train graph, every branch
	DeployedFLOPs FLOPs // deployed, BN folded (eval)
}

// Summarise counts m at imgsz×imgsz. It needs no weights.
func (m *Model) Summarise(imgsz int) (*Summary, error) {
	if imgsz <= 0 || imgsz%32 != 0 {
		return nil, fmt.Errorf("model: image size %d: want a positive multiple of 32", imgsz)
	}
	full, err := Describe(m.Config)
	if err != nil {
		return nil, err
	}
	dep, err := full.Deploy(true)
	if err != nil {
		return nil, err
	}
	s := &Summary{Config: m.Config, Imgsz: imgsz, Deployed: m.Deployed, Fused: m.Fused,
		Params: m.NumParams(), FullParams: full.NumParams()}
	s.O2MParams, s.AuxParams = full.PartParams()
	s.DeployedParams = s.FullParams - s.O2MParams - s.AuxParams
	s.FusedParams = dep.NumParams()
	train := !m.Deployed && !m.Fused
	var per []FLOPs
	if s.FLOPs, per, err = m.CountFLOPs(imgsz, train); err != nil {
		return nil, err
	}
	s.TrainFLOPs, _, _ = full.CountFLOPs(imgsz, true)
	s.DeployedFLOPs, _, _ = dep.CountFLOPs(imgsz, false)
	for i, l := range m.Layers {
		s.Layers = append(s.Layers, LayerRow{Index: l.Index, From: l.From, Repeats: l.Repeats,
			Module: l.Module.Type(), Args: l.Args, Params: m.LayerParams(i), FLOPs: per[i]})
	}
	return s, nil
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fromString(f []int) string {
	if len(f) == 1 {
		return strconv.Itoa(f[0])
	}
	parts := make([]string, len(f))
	for i, x := range f {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Write prints the summary as a table followed by the totals.
func (s *Summary) Write(w io.Writer) error {
	graph := "train graph"
	switch {
	case s.Deployed && s.Fused:
		graph = "deployed, BN folded"
	case s.Deployed:
		graph = "deployed"
	case s.Fused:
		graph = "train graph, BN folded"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "yolo26%s-seg, %d classes, %dx%d input (%s)\n\n", s.Config.Variant, s.Config.Classes, s.Imgsz, s.Imgsz, graph)
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "   #\tfrom\tn\tmodule\targuments\t      params\t  GFLOPs")
	for _, r := range s.Layers {
		fmt.Fprintf(tw, "%4d\t%s\t%d\t%s\t%s\t%12s\t%8.3f\n", r.Index, fromString(r.From), r.Repeats, r.Module, r.Args, group(r.Params), r.FLOPs.GFLOPs())
	}
	tw.Flush()
	mode := "train mode"
	if s.Deployed || s.Fused {
		mode = "eval mode"
	}
	line := func(label, value string) { fmt.Fprintf(&b, "  %-46s %14s\n", label, value) }
	b.WriteString("\nparameters\n")
	line("this model ("+graph+")", group(s.Params))
	line("full train graph", group(s.FullParams))
	line("one-to-many branches (training only)", group(s.O2MParams))
	line("semantic auxiliary branch (training only)", group(s.AuxParams))
	line("deployed = full − o2m − aux", group(s.DeployedParams))
	line("deployed, BN folded", group(s.FusedParams))
	fmt.Fprintf(&b, "\nFLOPs at %dx%d, batch 1 (GFLOPs = 2×MACs / 1e9)\n", s.Imgsz, s.Imgsz)
	g := func(f float64) string { return fmt.Sprintf("%.2f", f) }
	line("this model ("+mode+")", g(s.FLOPs.GFLOPs()))
	line("  of which attention matmuls", g(2*float64(s.FLOPs.MatMulMACs)/1e9))
	line("  of which transposed conv", g(2*float64(s.FLOPs.ConvTransposeMACs)/1e9))
	line("full train graph (train mode, all branches)", g(s.TrainFLOPs.GFLOPs()))
	line("deployed, BN folded", g(s.DeployedFLOPs.GFLOPs()))
	line("deployed, BN folded, thop rules (conv only)", g(s.DeployedFLOPs.ThopGFLOPs()))
	_, err := io.WriteString(w, b.String())
	return err
}
