package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runModel(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"segpipe", "--log-level", "warn", "model", "summary"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestModelSummary(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--variant", "n"}, ExitOK, []string{"3,126,280", "315,052", "79,184", "2,722,980", "11.45", "9.25"}},
		{[]string{"--variant", "x", "--deploy", "--fuse"}, ExitOK, []string{"(deployed, BN folded)", "62,819,132", "314.04", "313.49"}},
		{[]string{"--variant", "s", "--fuse"}, ExitOK, []string{"(train graph, BN folded)", "11,485,496"}},
		{[]string{"--variant", "m", "--deploy"}, ExitOK, []string{"(deployed)", "23,594,972"}},
		{[]string{"--variant", "n", "--classes", "3", "--imgsz", "320"}, ExitOK, []string{"3 classes, 320x320"}},
		{[]string{"--variant", "q"}, ExitUsage, []string{"--variant"}},
		{[]string{"--variant", "n", "--imgsz", "100"}, ExitUsage, []string{"--imgsz"}},
		{[]string{"--variant", "n", "--classes", "0"}, ExitUsage, []string{"--classes"}},
		{[]string{}, ExitUsage, []string{"variant"}},
	}
	for _, c := range cases {
		code, out, errOut := runModel(c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("%v: output lacks %q", c.args, w)
			}
		}
	}
}
