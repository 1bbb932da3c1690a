package model

import "github.com/segpipe/segpipe/trainer/tensor"

// Branch is one head branch set's per-anchor outputs. Anchors run over the
// P3, P4, P5 grids in that order, row-major (y then x) inside each grid.
type Branch struct {
	Boxes            *tensor.Tensor // [B, 4, A]: raw l, t, r, b distances in grid units (no activation)
	Scores           *tensor.Tensor // [B, nc, A]: class logits
	MaskCoefficients *tensor.Tensor // [B, 32, A]: raw mask coefficients
}

// Output is what Forward returns.
//
// In train mode One2Many and One2One are both set and Semseg is set when
// the model has the semantic branch; the one-to-one branch read detached
// neck features, so a loss on it trains only the one-to-one head. A loss
// that combines One2One with the prototypes should use Proto.Detach(), as
// the reference does, so that it does not train Proto26 either.
// In eval mode One2Many and Semseg are nil.
type Output struct {
	One2Many *Branch
	One2One  Branch
	// Feats are the head inputs P3, P4, P5 (for anchor generation).
	Feats [3]*tensor.Tensor
	// Proto is [B, 32, H/4, W/4], the mask prototypes.
	Proto *tensor.Tensor
	// Semseg is [B, nc, H/8, W/8], the semantic-segmentation logits.
	Semseg *tensor.Tensor
}
