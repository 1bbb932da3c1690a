package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// openGPU opens GPU 0 or skips the test with the reason (no driver, no
// device, a nocuda build).
func openGPU(t *testing.T) *device {
	t.Helper()
	d, err := open(0)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// gpuDev runs kernel cases on a real device.
type gpuDev struct {
	t     *testing.T
	d     *device
	k     *kernelSet
	mm    matmul
	sizes map[devptr]int
}

func (g *gpuDev) kernels() *kernelSet { return g.k }
func (g *gpuDev) matmul() matmul      { return g.mm }

func (g *gpuDev) alloc(n int) devptr {
	p, err := g.d.Alloc(n)
	if err != nil {
		g.t.Fatal(err)
	}
	g.sizes[p] = n
	ff := make([]byte, n)
	for i := range ff {
		ff[i] = 0xFF
	}
	if err := g.d.Upload(p, ff); err != nil {
		g.t.Fatal(err)
	}
	return p
}

func (g *gpuDev) upload(data any) devptr {
	b := toBytes(data)
	p := g.alloc(max(len(b), 1))
	if err := g.d.Upload(p, b); err != nil {
		g.t.Fatal(err)
	}
	return p
}

func (g *gpuDev) read(p devptr) []byte {
	b := make([]byte, g.sizes[p])
	if err := g.d.Download(b, p); err != nil {
		g.t.Fatal(err)
	}
	return b
}

// TestKernelsOnGPU runs the cases of TestKernelsOnCPU on GPU 0.
func TestKernelsOnGPU(t *testing.T) {
	d := openGPU(t)
	k, err := d.Kernels()
	if err != nil {
		t.Fatal(err)
	}
	bl, err := d.NewBlas(false)
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close(d)
	for _, c := range kernelCases() {
		t.Run(c.name, func(t *testing.T) {
			g := &gpuDev{t: t, d: d, k: k, mm: d.Matmul(bl), sizes: map[devptr]int{}}
			outs, check := c.run(g)
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			for _, o := range outs {
				got = append(got, g.read(o))
			}
			check(t, got)
			for p := range g.sizes {
				if err := d.Free(p); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestGemmOnGPU checks cuBLAS through the row-major mapping against the
// CPU reference GEMM, fp32 (pedantic) at 1e-5 and TF32 at 1e-2.
func TestGemmOnGPU(t *testing.T) {
	d := openGPU(t)
	for _, tf32 := range []bool{false, true} {
		bl, err := d.NewBlas(tf32)
		if err != nil {
			t.Fatal(err)
		}
		r := rnd(40)
		for _, g := range []backend.Gemm{
			{M: 33, N: 65, K: 17, Alpha: 1, Batch: 1},
			{TransA: true, M: 16, N: 9, K: 70, Alpha: 1, Beta: 1, Batch: 3, StrideA: 16 * 70, StrideB: 0, StrideC: 16 * 9},
			{TransB: true, M: 64, N: 64, K: 64, Alpha: 0.5, Batch: 2, StrideA: 64 * 64, StrideB: 64 * 64, StrideC: 64 * 64},
		} {
			na, nb, nc := max(g.Batch, 1)*g.M*g.K, max(g.Batch, 1)*g.K*g.N, max(g.Batch, 1)*g.M*g.N
			a, b, c := uniform(r, na, -1, 1), uniform(r, nb, -1, 1), uniform(r, nc, -1, 1)
			want := refGemm(g, a, b, c)
			gd := &gpuDev{t: t, d: d, sizes: map[devptr]int{}}
			pa, pb, pc := gd.upload(a), gd.upload(b), gd.upload(c)
			if err := d.Gemm(bl, g, pa, pb, pc); err != nil {
				t.Fatal(err)
			}
			tol := 1e-5
			if tf32 {
				tol = 1e-2
			}
			closeTo(t, "gemm", gd.read(pc), want, tol)
		}
		if err := bl.Close(d); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCudnnOnGPU checks cuDNN's convolution passes and batch-norm
// training against the CPU reference.
func TestCudnnOnGPU(t *testing.T) {
	d := openGPU(t)
	dn, err := d.NewDnn(false)
	if err != nil {
		t.Fatal(err)
	}
	defer dn.Close(d)
	r := rnd(41)
	for _, c := range []convShape{
		{N: 2, InC: 8, InH: 17, InW: 15, OutC: 16, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 1},
		{N: 2, InC: 16, InH: 16, InW: 16, OutC: 16, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 16},
		{N: 1, InC: 32, InH: 9, InW: 9, OutC: 8, KH: 1, KW: 1, Stride: 1, Pad: 0, Groups: 1},
	} {
		x := uniform(r, c.N*c.InC*c.InH*c.InW, -1, 1)
		w := uniform(r, c.OutC*c.InC/c.Groups*c.KH*c.KW, -1, 1)
		ny := c.N * c.OutC * c.OutH() * c.OutW()
		dy, dx0, dw0 := uniform(r, ny, -1, 1), uniform(r, len(x), -1, 1), uniform(r, len(w), -1, 1)
		wantY, wantDx, wantDw := refConv(c, x, w, dy, dx0, dw0)
		p, err := d.PlanConv(dn, c)
		if err != nil {
			t.Fatal(err)
		}
		gd := &gpuDev{t: t, d: d, sizes: map[devptr]int{}}
		px, pw, py, pdy, pdx, pdw := gd.upload(x), gd.upload(w), gd.alloc(4*ny), gd.upload(dy), gd.upload(dx0), gd.upload(dw0)
		must(d.ConvForward(dn, p, px, pw, py))
		must(d.ConvBackwardData(dn, p, pdy, pw, pdx, true))
		must(d.ConvBackwardFilter(dn, p, px, pdy, pdw))
		t.Logf("conv %+v: algorithms fwd %d (%d B), bwd data %d (%d B), bwd filter %d (%d B)", c,
			p.FwdAlgo, p.FwdWS, p.BwdDataAlgo, p.BwdDataWS, p.BwdFiltAlgo, p.BwdFiltWS)
		closeTo(t, "conv y", gd.read(py), wantY, 1e-4)
		closeTo(t, "conv dx", gd.read(pdx), wantDx, 1e-4)
		closeTo(t, "conv dw", gd.read(pdw), wantDw, 1e-4)
		p.Close(d, dn)
	}
	n, ch, hw := 4, 6, 33
	x, gamma, beta := uniform(r, n*ch*hw, -2, 3), uniform(r, ch, 0.5, 1.5), uniform(r, ch, -1, 1)
	dy := uniform(r, len(x), -1, 1)
	want := refBatchNorm(n, ch, hw, 1e-3, x, gamma, beta, dy)
	gd := &gpuDev{t: t, d: d, sizes: map[devptr]int{}}
	px, pg, pb := gd.upload(x), gd.upload(gamma), gd.upload(beta)
	py, pm, pi, pv := gd.alloc(4*len(x)), gd.alloc(4*ch), gd.alloc(4*ch), gd.alloc(4*ch)
	must(d.BatchNormTrain(dn, n, ch, hw, 1e-3, px, pg, pb, py, pm, pi, pv))
	pdx, pdg, pdb := gd.upload(make([]float32, len(x))), gd.upload(make([]float32, ch)), gd.upload(make([]float32, ch))
	must(d.BatchNormBackward(dn, n, ch, hw, 1e-3, px, gd.upload(dy), pm, pi, pg, pdx, pdg, pdb))
	for i, got := range [][]byte{gd.read(py), gd.read(pm), gd.read(pi), gd.read(pv), gd.read(pdx), gd.read(pdg), gd.read(pdb)} {
		closeTo(t, []string{"bn y", "bn mean", "bn invstd", "bn var", "bn dx", "bn dgamma", "bn dbeta"}[i], got, want[i], 1e-4)
	}

	// Inference with running statistics is the CPU's channel affine with
	// scale = γ/√(var+eps), shift = β − mean·scale.
	mean, variance := uniform(r, ch, -1, 1), uniform(r, ch, 0.5, 2)
	scale, shift := make([]float32, ch), make([]float32, ch)
	for i := range scale {
		scale[i] = gamma[i] / float32(math.Sqrt(float64(variance[i])+1e-3))
		shift[i] = beta[i] - mean[i]*scale[i]
	}
	wantInf := refChannelAffine(n, ch, hw, x, scale, shift)
	pyi := gd.alloc(4 * len(x))
	must(d.BatchNormInference(dn, n, ch, hw, 1e-3, px, pg, pb, gd.upload(mean), gd.upload(variance), pyi))
	closeTo(t, "bn inference", gd.read(pyi), wantInf, 1e-4)

	// cuDNN max pooling on tie-free inputs matches the CPU's (with ties
	// the two may route the gradient differently: the trainer's own
	// MaxPool kernel keeps PyTorch's rule).
	p := poolShape{N: 2, C: 3, H: 9, W: 11, K: 5, Stride: 1, Pad: 2}
	xp := uniform(r, p.N*p.C*p.H*p.W, -1, 1)
	no := p.N * p.C * p.OutH() * p.OutW()
	dyp := uniform(r, no, -1, 1)
	wantPY, _, wantPDx := refMaxPool(p, xp, dyp, make([]float32, len(xp)))
	pxp, pyp, pdxp := gd.upload(xp), gd.alloc(4*no), gd.upload(make([]float32, len(xp)))
	must(d.PoolForward(dn, p, pxp, pyp))
	must(d.PoolBackward(dn, p, pxp, pyp, gd.upload(dyp), pdxp))
	closeTo(t, "cudnn pool y", gd.read(pyp), wantPY, 0)
	closeTo(t, "cudnn pool dx", gd.read(pdxp), wantPDx, 1e-5)
}

// TestHostBufferRoundTrip checks pinned memory, events and the async
// upload path.
func TestHostBufferRoundTrip(t *testing.T) {
	d := openGPU(t)
	h, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	b := h.Bytes()
	for i := range b {
		b[i] = byte(i)
	}
	p, err := d.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	e0, _ := d.NewEvent(true)
	e1, _ := d.NewEvent(true)
	must(d.Record(e0, d.Stream()))
	must(d.UploadAsync(d.Stream(), p, h))
	must(d.Record(e1, d.Stream()))
	must(d.SyncEvent(e1))
	if ms, err := d.Elapsed(e0, e1); err != nil || ms < 0 {
		t.Errorf("elapsed %v ms, %v", ms, err)
	}
	got := make([]byte, 4096)
	must(d.Download(got, p))
	for i := range got {
		if got[i] != byte(i) {
			t.Fatalf("byte %d = %d", i, got[i])
		}
	}
}

// TestStagerOnGPU uploads batches of growing and shrinking sizes through
// the double-buffered stager, converts the images on the device and
// checks every byte and the upload count.
func TestStagerOnGPU(t *testing.T) {
	d := openGPU(t)
	k, err := d.Kernels()
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStager()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var want int64
	for b, n := range []int{3000, 70000, 500, 70001, 12} {
		img := make([]byte, n)
		for i := range img {
			img[i] = byte(i*7 + b)
		}
		masks := []byte{1, 0, 1, byte(b)}
		st, err := s.Stage(img, nil, masks)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(n + len(masks))
		g := &gpuDev{t: t, d: d, sizes: map[devptr]int{}}
		y := g.alloc(4 * n)
		must(k.ImageToFloat(st.Parts[0], y, n))
		mk := g.alloc(len(masks))
		must(d.CopyAsync(mk, st.Parts[2], len(masks)))
		must(st.Done())
		closeTo(t, "image", g.read(y), refImageToFloat(img), 0)
		if got := g.read(mk); string(got) != string(masks) {
			t.Errorf("batch %d masks %v, want %v", b, got, masks)
		}
	}
	if s.Uploaded() != want {
		t.Errorf("uploaded %d bytes, want %d", s.Uploaded(), want)
	}
}

// TestRunOnGPU queues several kernels in one hand-off to the device thread.
func TestRunOnGPU(t *testing.T) {
	d := openGPU(t)
	g := &gpuDev{t: t, d: d, sizes: map[devptr]int{}}
	const n = 10007
	x := g.alloc(4 * n)
	err := d.Run(func(k *kernelSet) error {
		if err := k.Fill(x, 2, n); err != nil {
			return err
		}
		if err := k.Scale(x, x, 1.5, false, n); err != nil {
			return err
		}
		return k.AddScalar(x, x, -1, n)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	for i := range want {
		want[i] = 2
	}
	closeTo(t, "fill, scale, add", g.read(x), want, 0)
}

// TestStagingOnGPU: the Backend's batch staging (backend.Stager) on a GPU,
// batches of growing and shrinking sizes, each checked against the same
// parts through UploadBytes (counts, bytes, widened images bit for bit).
func TestStagingOnGPU(t *testing.T) {
	be := openGPUBackend(t)
	rng := rand.New(rand.NewPCG(5, 8))
	for i, sh := range []struct{ images, px, instances int }{{2, 64, 3}, {8, 256, 40}, {1, 32, 0}, {16, 320, 60}, {2, 64, 1}} {
		stageStep(t, be, i, stagedBatch(rng, sh.images, sh.px, sh.instances, i != 2), func() {}, func() {})
	}
	be.FreeStaged()
}

// TestExpandWindowsOnGPU: the device expansion of windowed masks against
// raster.Expand on a GPU, grids up to the 160×160 prototype grid of 640 px.
func TestExpandWindowsOnGPU(t *testing.T) {
	checkExpandWindows(t, openGPUBackend(t), 200, 160)
}
