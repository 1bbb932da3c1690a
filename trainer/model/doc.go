// Package model builds the YOLO26-seg instance-segmentation family (n, s,
// m, l, x) for any class count, names its parameters with the reference
// implementation's flat state-dict keys, counts parameters and FLOPs,
// derives the deployed (inference) model and saves and loads checkpoints.
//
// Semantics a user must know:
//   - The model is a tree of small modules (Conv = conv+BN+SiLU, Bottleneck,
//     C3k, C3k2, SPPF, Attention/PSABlock/C2PSA, Upsample, Concat, Segment26
//     with Proto26) composed by factory functions; Describe builds the tree
//     with shapes only, New also allocates and initialises the weights.
//   - BatchNorm uses eps 1e-3 and momentum 0.03 (running = 0.97·running +
//     0.03·batch, unbiased batch variance for the running value).
//   - Train-mode forward returns both branch sets (one-to-many and
//     one-to-one), the prototypes and the semantic logits; the one-to-one
//     branches read detached neck features so their gradients stop at the
//     head. Eval-mode forward returns the one-to-one outputs and prototypes.
//   - Deploy shares every kept parameter with the full model (same *Param)
//     and drops the one-to-many branches and the semantic branch from the
//     tree; with fuse it folds BN into new conv weights instead.
//   - FLOPs are 2×MACs counted while running the same forward code over
//     shapes only, so the count always follows the executed graph.
//   - Checkpoints are safetensors files holding parameters and BN running
//     statistics; loading is strict and reports every problem at once.
package model
