package model

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummaryTotals(t *testing.T) {
	for i, s := range Scales {
		m, _ := Describe(Config{Variant: s.Name})
		sum, err := m.Summarise(640)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Params != refFull[i] || sum.FullParams != refFull[i] || sum.O2MParams != refO2M[i] ||
			sum.AuxParams != refAux[i] || sum.DeployedParams != refDeployed[i] || sum.FusedParams != refDeployFused[i] {
			t.Errorf("%s: %+v", s.Name, sum)
		}
		var rows int64
		var fl FLOPs
		for _, r := range sum.Layers {
			rows += r.Params
			fl.add(r.FLOPs)
		}
		if rows != sum.Params || fl != sum.FLOPs {
			t.Errorf("%s: layer rows sum to %d params / %+v, totals %d / %+v", s.Name, rows, fl, sum.Params, sum.FLOPs)
		}
	}
	if _, err := (&Model{}).Summarise(100); err == nil {
		t.Error("image size 100 accepted")
	}
}

func TestSummaryWrite(t *testing.T) {
	m, _ := Describe(Config{Variant: "n"})
	d, _ := m.Deploy(true)
	for _, c := range []struct {
		m    *Model
		want []string
	}{
		{m, []string{"(train graph)", "Segment26", "[80, 32, 64, [64, 128, 256]]", "863,656", "3,126,280", "11.45", "[32, 64, 1, False, 0.25]", "[384, 256, 1, True, 0.5, True]"}},
		{d, []string{"(deployed, BN folded)", "2,722,980", "9.25", "9.13"}},
	} {
		sum, err := c.m.Summarise(640)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := sum.Write(&b); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("summary lacks %q:\n%s", w, b.String())
			}
		}
	}
}

func TestFuseKeepsBranches(t *testing.T) {
	// All branches kept, BN folded only (spec §9).
	want := []int64{3115632, 11485496, 27081384, 31477672, 70637032}
	for i, s := range Scales {
		m, _ := Describe(Config{Variant: s.Name})
		f, err := m.Fuse()
		if err != nil {
			t.Fatal(err)
		}
		if got := f.NumParams(); got != want[i] {
			t.Errorf("%s: fused full graph %d params, want %d", s.Name, got, want[i])
		}
		if _, err := f.Fuse(); err == nil {
			t.Error("fusing twice accepted")
		}
	}
}
