package onnxgen

import (
	"fmt"
	"math"
)

// Attention is the way a generated model writes each layer's attention:
// the same arithmetic in the patterns real exports have, so the engine's
// attention rewrite (engine/model) is tested on each.
type Attention string

// The attention patterns.
const (
	// AttentionGenerator is this package's own: constant Reshape shapes,
	// Kᵀ by one Transpose (0, 2, 3, 1), Mul by 1/√d, an additive
	// [B, 1, 1, S] mask of -1e9.
	AttentionGenerator Attention = ""
	// AttentionEager is Hugging Face's eager XLMRobertaSelfAttention as
	// torch.onnx.export writes it: Reshape shapes built from
	// Shape/Gather/Unsqueeze/Concat, Kᵀ by a second Transpose (0, 1, 3, 2)
	// after the head split, Div by √d, and the extended mask
	// Unsqueeze←Mul←Sub←Cast of float32's lowest value.
	AttentionEager Attention = "eager"
	// AttentionSDPA is XLMRobertaSdpaSelfAttention through torch's
	// scaled_dot_product_attention export: the scale computed in the graph
	// from the head size (1/sqrt(Cast(Shape(q)[-1]))), its square root
	// multiplied into Q and Kᵀ, and the mask expanded to [B, 1, S, S] and
	// filled by Where, as _prepare_4d_attention_mask_for_sdpa does.
	AttentionSDPA Attention = "sdpa"
)

// lowest is float32's most negative finite value, the fill of HF's masks.
const lowest = -math.MaxFloat32

func (a Attention) valid() bool {
	return a == AttentionGenerator || a == AttentionEager || a == AttentionSDPA
}

// mask returns the additive attention mask for a's layers.
func (b *builder) mask(a Attention) string {
	switch a {
	case AttentionEager:
		// (1.0 - mask.to(float)) * min, then [:, None, None, :].
		m := b.op("Cast", []attribute{intAttr("to", dtFloat)}, "attention_mask")
		m = b.op("Mul", nil, b.op("Sub", nil, b.scalar(1), m), b.scalar(lowest))
		return b.op("Unsqueeze", nil, m, b.ints(false, 1, 2))
	case AttentionSDPA:
		// mask[:, None, None, :].expand(B, 1, S, S).to(float); inverted =
		// 1 - expanded; inverted.masked_fill(inverted.to(bool), min).
		shape := b.op("Shape", nil, "input_ids")
		bsz := b.op("Gather", []attribute{intAttr("axis", 0)}, shape, b.ints(false, 0))
		seq := b.op("Gather", []attribute{intAttr("axis", 0)}, shape, b.ints(false, 1))
		target := b.op("Concat", []attribute{intAttr("axis", 0)}, bsz, b.ints(false, 1), seq, seq)
		m := b.op("Unsqueeze", nil, "attention_mask", b.ints(false, 1, 2))
		m = b.op("Cast", []attribute{intAttr("to", dtFloat)}, b.op("Expand", nil, m, target))
		inv := b.op("Sub", nil, b.scalar(1), m)
		fill := b.op("Cast", []attribute{intAttr("to", dtBool)}, inv)
		return b.op("Where", nil, fill, b.scalar(lowest), inv)
	}
	// Additive mask [batch, 1, 1, seq]: 0 for real keys, maskedScore for padding.
	maskF := b.op("Cast", []attribute{intAttr("to", dtFloat)}, "attention_mask")
	addMask := b.op("Mul", nil, b.op("Sub", nil, b.scalar(1), maskF), b.scalar(maskedScore))
	return b.op("Unsqueeze", nil, addMask, b.ints(false, 1, 2))
}

// dynShape is the shape [dim 0 of x, dim 1 of x, rest...] built as
// torch.onnx.export builds x.size()[:-1] + (rest...).
func (b *builder) dynShape(x string, rest ...int64) string {
	dim := func(i int64) string {
		g := b.op("Gather", []attribute{intAttr("axis", 0)}, b.op("Shape", nil, x), b.ints(true, i))
		return b.op("Unsqueeze", nil, g, b.ints(false, 0))
	}
	return b.op("Concat", []attribute{intAttr("axis", 0)}, dim(0), dim(1), b.ints(false, rest...))
}

// attention computes the context [batch, seq, H] from the projections q, k
// and v in pattern a (not the generator's own, which layer writes).
func (b *builder) attention(a Attention, s Size, q, k, v, addMask string) string {
	heads, d := int64(s.Heads), int64(s.Hidden/s.Heads)
	h := int64(s.Hidden)
	split := func(t string) string {
		return b.op("Transpose", []attribute{intsAttr("perm", 0, 2, 1, 3)}, b.op("Reshape", nil, t, b.dynShape(t, heads, d)))
	}
	var probs string
	switch a {
	case AttentionEager:
		kt := b.op("Transpose", []attribute{intsAttr("perm", 0, 1, 3, 2)}, split(k))
		scores := b.op("Div", nil, b.op("MatMul", nil, split(q), kt), b.scalar(float32(math.Sqrt(float64(d)))))
		probs = b.op("Softmax", []attribute{intAttr("axis", -1)}, b.op("Add", nil, scores, addMask))
	case AttentionSDPA:
		qh, kh := split(q), split(k)
		last := b.op("Slice", nil, b.op("Shape", nil, qh), b.ints(false, -1), b.ints(false, math.MaxInt64))
		scale := b.op("Div", nil, b.scalar(1), b.op("Sqrt", nil, b.op("Cast", []attribute{intAttr("to", dtFloat)}, last)))
		root := b.op("Sqrt", nil, b.op("Cast", []attribute{intAttr("to", dtFloat)}, scale))
		kt := b.op("Mul", nil, b.op("Transpose", []attribute{intsAttr("perm", 0, 1, 3, 2)}, kh), root)
		scores := b.op("MatMul", nil, b.op("Mul", nil, qh, root), kt)
		probs = b.op("Softmax", []attribute{intAttr("axis", -1)}, b.op("Add", nil, scores, addMask))
	default:
		panic(fmt.Sprintf("onnxgen: attention %q", a))
	}
	ctx := b.op("Transpose", []attribute{intsAttr("perm", 0, 2, 1, 3)}, b.op("MatMul", nil, probs, split(v)))
	return b.op("Reshape", nil, ctx, b.dynShape(ctx, h))
}
