package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/segpipe/segpipe/cli"
)

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoding it strictly refuses any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

type manifests struct {
	kust     kustomization
	pvc      *corev1.PersistentVolumeClaim
	convert  *batchv1.Job
	merge    *batchv1.Job
	service  *corev1.Service
	serveSet *appsv1.StatefulSet
}

// load decodes kustomization.yaml and every resource it lists with the
// Kubernetes API types, strictly: an unknown or misspelt field fails.
func load(t *testing.T) *manifests {
	t.Helper()
	var m manifests
	strict(t, "kustomization.yaml", &m.kust)
	if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", m.kust.APIVersion, m.kust.Kind)
	}
	yamls, _ := filepath.Glob("*.yaml")
	for _, f := range yamls {
		if f != "kustomization.yaml" && !slices.Contains(m.kust.Resources, f) {
			t.Errorf("%s is not listed in kustomization.yaml resources", f)
		}
	}
	for _, f := range m.kust.Resources {
		var tm metav1.TypeMeta
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.Contains(string(b), "\n---") {
			t.Fatalf("%s: one object per file", f)
		}
		switch gk := tm.APIVersion + "/" + tm.Kind; gk {
		case "v1/PersistentVolumeClaim":
			m.pvc = decode[corev1.PersistentVolumeClaim](t, f)
		case "batch/v1/Job":
			j := decode[batchv1.Job](t, f)
			if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion {
				m.convert = j
			} else {
				m.merge = j
			}
		case "v1/Service":
			m.service = decode[corev1.Service](t, f)
		case "apps/v1/StatefulSet":
			m.serveSet = decode[appsv1.StatefulSet](t, f)
		default:
			t.Fatalf("%s: unexpected %s", f, gk)
		}
	}
	if m.pvc == nil || m.convert == nil || m.merge == nil || m.service == nil || m.serveSet == nil {
		t.Fatalf("missing objects: %+v", m)
	}
	return &m
}

func strict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func decode[T any](t *testing.T, file string) *T {
	t.Helper()
	v := new(T)
	strict(t, file, v)
	return v
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	var s appsv1.StatefulSet
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  replica: 3\n"), &s)
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

// parsed runs args through the real segpipe command tree with every
// action replaced by a recorder, so urfave/cli checks the flag names,
// their values and the sub-command path exactly as the binary would.
func parsed(t *testing.T, env []corev1.EnvVar, args []string) *ucli.Command {
	t.Helper()
	root := cli.Commands()
	var got *ucli.Command
	var walk func(c *ucli.Command)
	walk = func(c *ucli.Command) {
		if c.Action != nil {
			c.Action = func(_ context.Context, c *ucli.Command) error { got = c; return nil }
		}
		for _, s := range c.Commands {
			walk(s)
		}
	}
	walk(root)
	for _, e := range env {
		if e.Value != "" {
			t.Setenv(e.Name, e.Value)
		} else {
			t.Setenv(e.Name, "from-"+e.Name)
		}
	}
	if err := root.Run(context.Background(), append([]string{"segpipe"}, args...)); err != nil {
		t.Fatalf("segpipe %s: %v", strings.Join(args, " "), err)
	}
	if got == nil {
		t.Fatalf("segpipe %s: no command ran", strings.Join(args, " "))
	}
	return got
}

func container(t *testing.T, spec *corev1.PodSpec, image string) *corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if c.Image != image {
		t.Errorf("container %s: image %q, want %q (the name kustomization.yaml sets)", c.Name, c.Image, image)
	}
	if c.Command != nil {
		t.Errorf("container %s: command %v overrides the image's segpipe entry point", c.Name, c.Command)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("container %s: requests %v limits %v: want cpu and memory requests and a memory limit", c.Name, c.Resources.Requests, c.Resources.Limits)
	}
	return c
}

func port(t *testing.T, hostport string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("%q is not HOST:PORT", hostport)
	}
	return int32(n)
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// mountOf finds the mount that holds dir.
func mountOf(c *corev1.Container, dir string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// onClaim checks that file lies on a volume mount backed by claim.
func onClaim(t *testing.T, spec *corev1.PodSpec, c *corev1.Container, file, claim string) {
	t.Helper()
	m, ok := mountOf(c, file)
	if !ok {
		t.Errorf("%s: %s is on no volume", c.Name, file)
		return
	}
	v := volume(spec, m.Name)
	if v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claim {
		t.Errorf("%s: %s is not on the claim %s", c.Name, file, claim)
	}
}

func TestManifestsWiring(t *testing.T) {
	m := load(t)
	if len(m.kust.Images) != 1 {
		t.Fatalf("kustomization images %v: want the one segpipe image", m.kust.Images)
	}
	image := m.kust.Images[0].Name

	t.Run("image user", func(t *testing.T) {
		b, err := os.ReadFile("Dockerfile")
		if err != nil {
			t.Fatal(err)
		}
		var user string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "USER" {
				user, _, _ = strings.Cut(f[1], ":")
			}
		}
		for _, spec := range []*corev1.PodSpec{&m.convert.Spec.Template.Spec, &m.merge.Spec.Template.Spec, &m.serveSet.Spec.Template.Spec} {
			sc := spec.SecurityContext
			if sc == nil || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != user || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("pod %s: securityContext %+v, want runAsNonRoot and runAsUser %s (the Dockerfile's USER)", spec.Containers[0].Name, sc, user)
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		s, set := m.service, m.serveSet
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("service clusterIP %q: want headless (None) so the name resolves to every server", s.Spec.ClusterIP)
		}
		if set.Spec.ServiceName != s.Name {
			t.Errorf("statefulset serviceName %q, service %q", set.Spec.ServiceName, s.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Spec.Selector {
			if set.Spec.Template.Labels[k] != v {
				t.Errorf("service selector %s=%s does not select the servers' pods", k, v)
			}
		}
		if !sel.Matches(labels.Set(set.Spec.Template.Labels)) {
			t.Error("statefulset selector does not match its pod template")
		}
		c := container(t, &set.Spec.Template.Spec, image)
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("service port %s: target %v, want a named container port", p.Name, p.TargetPort)
				continue
			}
			if cp := containerPort(t, c, p.TargetPort.StrVal); cp != p.Port {
				t.Errorf("service port %s is %d, the container's %d", p.Name, p.Port, cp)
			}
		}
	})

	t.Run("serve", func(t *testing.T) {
		spec := &m.serveSet.Spec.Template.Spec
		c := container(t, spec, image)
		cmd := parsed(t, c.Env, c.Args)
		if cmd.Name != "serve" {
			t.Fatalf("args run %q, want serve", cmd.FullName())
		}
		// Flight and metrics ports: the listen flags, the container ports
		// and the probes agree.
		flightPort := containerPort(t, c, "flight")
		if p := port(t, cmd.String("addr")); p != flightPort {
			t.Errorf("--addr port %d, container port flight %d", p, flightPort)
		}
		metricsPort := containerPort(t, c, "metrics")
		if p := port(t, cmd.String("metrics-addr")); p != metricsPort {
			t.Errorf("--metrics-addr port %d, container port metrics %d", p, metricsPort)
		}
		for _, pr := range []struct {
			what  string
			probe *corev1.Probe
			path  string
		}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
			if pr.probe == nil || pr.probe.HTTPGet == nil {
				t.Errorf("%s probe: want an HTTP GET", pr.what)
				continue
			}
			g := pr.probe.HTTPGet
			if g.Path != pr.path || (g.Port.StrVal != "metrics" && g.Port.IntVal != metricsPort) {
				t.Errorf("%s probe GET %s on %v, want %s on the metrics port", pr.what, g.Path, g.Port.String(), pr.path)
			}
			// Issue 30: the probes answered in up to 1 s on saturated
			// cores, Kubernetes' default timeout.
			if pr.probe.TimeoutSeconds < 3 {
				t.Errorf("%s probe timeout %d s, want at least 3 s: a busy server answers in up to 1 s", pr.what, pr.probe.TimeoutSeconds)
			}
		}
		// The token: SEGPIPE_TOKEN from the Secret, which serve reads.
		var tokenEnv *corev1.EnvVar
		for i := range c.Env {
			if c.Env[i].Name == "SEGPIPE_TOKEN" {
				tokenEnv = &c.Env[i]
			}
		}
		if tokenEnv == nil || tokenEnv.ValueFrom == nil || tokenEnv.ValueFrom.SecretKeyRef == nil ||
			tokenEnv.ValueFrom.SecretKeyRef.Name != "segpipe-token" || tokenEnv.ValueFrom.SecretKeyRef.Key != "token" {
			t.Errorf("SEGPIPE_TOKEN %+v: want it from secret segpipe-token key token", tokenEnv)
		}
		if got := cmd.String("token"); got != "from-SEGPIPE_TOKEN" {
			t.Errorf("serve does not take its token from SEGPIPE_TOKEN (got %q)", got)
		}
		// TLS: both files from the kubernetes.io/tls Secret.
		for _, f := range []string{cmd.String("tls-cert"), cmd.String("tls-key")} {
			mnt, ok := mountOf(c, f)
			v := volume(spec, mnt.Name)
			if !ok || v == nil || v.Secret == nil || v.Secret.SecretName != "segpipe-tls" {
				t.Errorf("%s is not on the segpipe-tls secret volume", f)
				continue
			}
			if base := path.Base(f); base != corev1.TLSCertKey && base != corev1.TLSPrivateKeyKey {
				t.Errorf("%s: a kubernetes.io/tls secret holds %s and %s", f, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
			}
		}
		// Peers: the headless Service's name and Flight port.
		host, p, err := net.SplitHostPort(cmd.String("peers-dns"))
		if err != nil || host != m.service.Name || p != strconv.Itoa(int(flightPort)) {
			t.Errorf("--peers-dns %q: want %s:%d", cmd.String("peers-dns"), m.service.Name, flightPort)
		}
		onClaim(t, spec, c, cmd.String("shards"), m.pvc.Name)
		// Memory: one measured stream fits under the Go limit, and the
		// Go limit under the container's.
		limit := c.Resources.Limits.Memory()
		if req := c.Resources.Requests.Memory(); req.Cmp(*limit) != 0 {
			t.Errorf("memory request %v and limit %v: want them equal (the stream's working set is known)", req, limit)
		}
		var goLimit string
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				goLimit = e.Value
			}
		}
		gl, err := resource.ParseQuantity(strings.TrimSuffix(goLimit, "B"))
		if err != nil || gl.Cmp(*limit) >= 0 || gl.Value() < measuredStreamPeak {
			t.Errorf("GOMEMLIMIT %q: want it between one stream's measured peak (%d MiB) and the container limit %v", goLimit, measuredStreamPeak>>20, limit)
		}
		if w := cmd.Int("workers"); int64(w) > c.Resources.Requests.Cpu().Value() {
			t.Errorf("--workers %d on a request of %v CPUs", w, c.Resources.Requests.Cpu())
		}
	})

	t.Run("convert", func(t *testing.T) {
		j := m.convert
		if j.Spec.Completions == nil || j.Spec.Parallelism == nil || *j.Spec.Completions < 2 {
			t.Fatalf("completions %v parallelism %v", j.Spec.Completions, j.Spec.Parallelism)
		}
		n := int(*j.Spec.Completions)
		if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever && j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
			t.Errorf("restartPolicy %q", j.Spec.Template.Spec.RestartPolicy)
		}
		spec := &j.Spec.Template.Spec
		c := container(t, spec, image)
		var indexVar string
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
				indexVar = e.Name
			}
		}
		if indexVar == "" {
			t.Fatal("no env var holds the completion index")
		}
		var outs []string
		for i := range n {
			// What the kubelet does: expand $(VAR) from the container's env.
			args := make([]string, len(c.Args))
			for k, a := range c.Args {
				args[k] = strings.ReplaceAll(a, "$("+indexVar+")", strconv.Itoa(i))
			}
			cmd := parsed(t, nil, args)
			if cmd.FullName() != "segpipe convert coco" && cmd.FullName() != "segpipe convert yolo" {
				t.Fatalf("args run %q, want convert coco|yolo", cmd.FullName())
			}
			if want := fmt.Sprintf("%d/%d", i, n); cmd.String("part") != want {
				t.Errorf("index %d: --part %q, want %q", i, cmd.String("part"), want)
			}
			if !cmd.Bool("resume") {
				t.Error("a retried part should continue: want --resume")
			}
			outs = append(outs, cmd.String("out"))
		}
		if len(slices.Compact(slices.Clone(outs))) != 1 {
			t.Errorf("parts write to different --out %v", outs)
		}
		onClaim(t, spec, c, outs[0], m.pvc.Name)

		mc := container(t, &m.merge.Spec.Template.Spec, image)
		mcmd := parsed(t, nil, mc.Args)
		if mcmd.FullName() != "segpipe manifest merge" || mcmd.NArg() != 1 || mcmd.Args().First() != outs[0] {
			t.Errorf("merge job runs %q %v, want manifest merge %s", mcmd.FullName(), mcmd.Args().Slice(), outs[0])
		}
		if mcmd.Duration("wait") <= 0 {
			t.Error("the merge starts beside the parts: want --wait")
		}
		onClaim(t, &m.merge.Spec.Template.Spec, mc, outs[0], m.pvc.Name)
	})
}

// measuredStreamPeak is the peak RSS of one serve stream on coco-tiny at
// batch 32, imgsz 640 over 24 epochs with the deployment's flags and
// GOMEMLIMIT=768MiB, from scripts/measure-serve-memory.sh (README, "A
// loader fleet").
const measuredStreamPeak = 666 << 20
