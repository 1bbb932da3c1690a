// Package optim holds the optimisers and the schedule of YOLO26 training,
// as Ultralytics 8.4.2 runs them: MuSGD (what optimizer=auto selects), SGD
// with Nesterov momentum and AdamW; the reference's parameter groups; the
// warmup and linear learning-rate schedule; gradient accumulation to the
// nominal batch; global-norm gradient clipping; and the weight EMA.
//
// Semantics a user must know:
//
//   - Parameters are Param values whose Value and Gradient are the model
//     tensors' buffers on the run's backend. Steps update the values in
//     place; ClipGradNorm scales the gradients in place.
//   - Groups (BuildGroups), first matching rule wins: ndim ≥ 2 → Muon (or
//     the decayed weight group when not using MuSGD); name contains "bias" →
//     bias (no decay); Norm or logit_scale → bn (no decay); otherwise weight
//     (decay). Each is split into a 3×-lr subgroup for names matching the
//     reference's (?=.*23)(?=.*cv3)|proto\.semseg|flow_model, giving eight
//     groups in the order [weight×3, weight, bn×3, bn, bias×3, bias, muon×3,
//     muon]. SGD and AdamW use the same split.
//   - MuSGD, Muon groups: m ← lerp(m, g, 1−μ); u = lerp(g, m, μ); O = NS5(u
//     viewed as dim0 × rest); p ← p − lr·muon·√max(1, kh/kw)·O; then an SGD
//     step weighted by sgd on the updated p with g + λp and its own Nesterov
//     buffer (weight decay acts only here). Other groups take plain
//     Nesterov SGD. The part weights are 0.5/0.5 above 10,000 iterations and
//     0.1/1.0 otherwise (Auto).
//   - Newton–Schulz runs in float32 (five steps, a, b, c = 3.4445, −4.7750,
//     2.0315). The reference runs it in bfloat16; on near-rank-deficient
//     gradients the two differ by a median 6% (up to 89%) per tensor, so a
//     Muon step agrees with the reference's float32 variant, not bit for bit
//     with its default one.
//   - Schedule.Apply sets every group's lr and momentum for an iteration:
//     during the first max(round(3·batches per epoch), 100) iterations lr
//     ramps from 0 (bias groups from WarmupBiasLR, which auto forces to 0)
//     to lr0·lf(epoch) and momentum from 0.8 to 0.937, and accumulation from
//     1 to round(64/batch) batches; afterwards lr = lr0·lf(epoch) with
//     lf(e) = max(1 − e/epochs, 0)·(1 − lrf) + lrf.
//   - Accumulator.Due steps when ni − (last step) ≥ accumulate, so
//     iteration 0 always steps (with lr 0 under auto: parameters unchanged,
//     buffers filled). Losses are summed over accumulated batches, not
//     averaged.
//   - Optimizer.State / LoadState exchange the momentum (and Adam) buffers
//     as "<param>.<buffer>" float32 slices with the reference's buffer names,
//     for checkpoints and exact resume; EMA.Values and EMA.Updates hold the
//     average's state, Accumulator.Last/Restore the accumulation phase.
//   - Clip at global norm 10 with coefficient min(10/(norm + 1e-6), 1) before
//     each step; EMA after it: d = 0.9999·(1 − exp(−u/2000)).
//
// # On a device
//
// Every optimiser step, ClipGradNorm (norm and coefficient together),
// GlobalNorm, ScaleGrads and the EMA update is one fused kernel over all
// the tensors it touches, on the parameters' backend; ZeroGrad is the
// backend's Fill. The Go loops in this package are those kernels' CPU
// implementation (Newton–Schulz included), written once: on devices that
// run Go kernels on their own memory (Kernels.Host, which trainer/device
// chooses for cpu and emu when it opens them) they run through RunHost on the buffers in place, so nothing crosses
// during training and emu equals cpu bit for bit. The optimisers' own
// buffers (momentum, Adam moments, the Newton–Schulz scratch) and the EMA's
// average are allocated on that backend too; State/LoadState and
// EMA.Values/Load are the only crossings, made at checkpoint save and
// load, and the checkpoint keys are the reference's.
//
// They are fused kernels rather than compositions of tensor ops because a
// composition would change the rounding that the golden tests and the
// bit-identical resume hold. A device without host kernels runs them
// through their device twins (Kernels.Device, DeviceKernels; the CUDA
// backend implements them: every optimiser step, Muon's Newton–Schulz included,
// ClipGradNorm/ClipGrads with the coefficient applied on the device,
// GlobalNorm, ScaleGrads, ZeroGrad and the EMA update; the steps take a
// group's parameters as one list, so that a device can update them in one
// launch), checked against this code;
// then nothing crosses but the one norm ClipGradNorm and GlobalNorm
// return (ClipGrads returns none). Which of the two runs is decided once,
// when the device opens, and travels with each Param (Param.Kernels).
package optim
