package onnxgen

import (
	"errors"
	"fmt"
	"math"
)

// Size is the shape of a generated encoder.
type Size struct {
	Hidden       int
	Layers       int
	Heads        int
	Intermediate int
	// MaxPositions is max_position_embeddings; the model takes at most
	// MaxPositions-2 tokens, because XLM-R positions start at pad id + 1.
	MaxPositions int
}

// The sizes genmodel knows. Tiny is committed for tests and keeps
// BGE-M3's 8194 positions so the long-text paths run; Small is about
// MiniLM, for benchmarks; M3 is BGE-M3's own shape (XLM-RoBERTa large:
// 24 layers of hidden 1024), for measuring what depends on a layer's
// width (int8 against fp32) with fewer layers where a full one does not fit.
var (
	Tiny  = Size{Hidden: 32, Layers: 2, Heads: 4, Intermediate: 64, MaxPositions: 8194}
	Small = Size{Hidden: 384, Layers: 6, Heads: 12, Intermediate: 1536, MaxPositions: 8194}
	M3    = Size{Hidden: 1024, Layers: 24, Heads: 16, Intermediate: 4096, MaxPositions: 8194}
)

// SizeByName returns [Tiny], [Small] or [M3].
func SizeByName(name string) (Size, error) {
	switch name {
	case "tiny":
		return Tiny, nil
	case "small":
		return Small, nil
	case "m3":
		return M3, nil
	}
	return Size{}, fmt.Errorf("%w: size %q (want tiny, small or m3)", ErrConfig, name)
}

// Layout is the export layout: which outputs the graph has.
type Layout string

// The two layouts of the model directory contract.
const (
	// LayoutHidden outputs last_hidden_state; the heads ship as safetensors.
	LayoutHidden Layout = "hidden"
	// LayoutHeads outputs dense_vecs, sparse_vecs and colbert_vecs.
	LayoutHeads Layout = "heads"
)

// PadID is the XLM-R pad token id; positions are counted from PadID+1.
const PadID = 1

// layerNormEps is XLM-R's layer_norm_eps.
const layerNormEps = 1e-5

// maskedScore is added to the attention scores of padding keys. A finite
// value (not -inf) keeps a row of only padding free of NaN, and exp of it
// underflows to exactly 0, so padding changes nothing for real tokens.
const maskedScore = -1e9

// ErrConfig reports an invalid [Config].
var ErrConfig = errors.New("onnxgen: invalid config")

// Config is what a generated model depends on; equal configs give
// byte-identical files.
type Config struct {
	Size   Size
	Layout Layout
	// FP16 stores the weights as float16 (cast to float32 in the graph, so
	// inputs, outputs and compute stay float32 as the contract says).
	FP16      bool
	Seed      uint64
	VocabSize int
	// Attention is the pattern the layers' attention is written in; the
	// zero value is the generator's own. The others compute the same
	// vectors.
	Attention Attention
	// ExternalData writes the weights to model.onnx_data beside a small
	// model.onnx, the layout of exports over 2 GB (BGE-M3 in float32).
	ExternalData bool
}

func (c Config) validate() error {
	s := c.Size
	switch {
	case c.Layout != LayoutHidden && c.Layout != LayoutHeads:
		return fmt.Errorf("%w: layout %q (want hidden or heads)", ErrConfig, c.Layout)
	case s.Hidden <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.Intermediate <= 0:
		return fmt.Errorf("%w: size %+v", ErrConfig, s)
	case s.Hidden%s.Heads != 0:
		return fmt.Errorf("%w: hidden %d is not a multiple of heads %d", ErrConfig, s.Hidden, s.Heads)
	case s.MaxPositions < PadID+2:
		return fmt.Errorf("%w: max positions %d", ErrConfig, s.MaxPositions)
	case c.VocabSize <= PadID:
		return fmt.Errorf("%w: vocab size %d", ErrConfig, c.VocabSize)
	case !c.Attention.valid():
		return fmt.Errorf("%w: attention %q (want eager, sdpa or empty)", ErrConfig, c.Attention)
	case !c.ExternalData && c.weightBytes() > maxInlineBytes:
		return fmt.Errorf("%w: about %d MiB of weights do not fit in one model.onnx (protobuf's 2 GiB); write them beside it (external data) or use fewer layers", ErrConfig, c.weightBytes()>>20)
	}
	return nil
}

// maxInlineBytes is how many weight bytes model.onnx may hold: protobuf
// refuses messages of 2 GiB, and the graph takes some room besides.
const maxInlineBytes = 1<<31 - 64<<20

// weightBytes is about the bytes of the model's weights: embeddings
// (words, positions, one token type), per layer the four attention
// projections, the feed-forward pair, their biases and two LayerNorms.
func (c Config) weightBytes() int64 {
	h, i := int64(c.Size.Hidden), int64(c.Size.Intermediate)
	elems := (int64(c.VocabSize)+int64(c.Size.MaxPositions)+1)*h +
		int64(c.Size.Layers)*(4*h*h+2*h*i+4*h+i+h+4*h)
	if c.FP16 {
		return 2 * elems
	}
	return 4 * elems
}

// Model is a generated model: the ONNX bytes, and for the hidden layout the
// head weights in the torch layout of BGE-M3's sparse_linear and
// colbert_linear (weight [out, in], bias [out]).
type Model struct {
	ONNX []byte
	// Data is the external data file's content, with [Config.ExternalData].
	Data                       []byte
	SparseWeight, SparseBias   []float32
	ColBERTWeight, ColBERTBias []float32
}

// Build generates the model for c.
func Build(c Config) (*Model, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := newWeights(c.Size, c.VocabSize, c.Seed)
	if c.FP16 {
		for _, v := range w.all() {
			roundHalf(v)
		}
	}
	b := &builder{fp16: c.FP16, attn: c.Attention, g: graph{name: "jetembed_genmodel"}}
	hidden := b.encoder(c.Size, c.VocabSize, w)
	h := int64(c.Size.Hidden)
	batchSeq := []dim{{param: "batch"}, {param: "sequence"}}
	b.g.inputs = []valueInfo{
		{name: "input_ids", dtype: dtInt64, dims: batchSeq},
		{name: "attention_mask", dtype: dtInt64, dims: batchSeq},
	}
	if c.Layout == LayoutHidden {
		b.opTo("last_hidden_state", "Identity", nil, hidden)
		b.g.outputs = []valueInfo{{name: "last_hidden_state", dtype: dtFloat, dims: []dim{{param: "batch"}, {param: "sequence"}, {value: h}}}}
	} else {
		b.heads(c.Size.Hidden, hidden, w)
		b.g.outputs = []valueInfo{
			{name: "dense_vecs", dtype: dtFloat, dims: []dim{{param: "batch"}, {value: h}}},
			{name: "sparse_vecs", dtype: dtFloat, dims: []dim{{param: "batch"}, {param: "sequence"}, {value: 1}}},
			{name: "colbert_vecs", dtype: dtFloat, dims: []dim{{param: "batch"}, {param: "colbert_sequence"}, {value: h}}},
		}
	}
	doc := fmt.Sprintf("jetembed genmodel: XLM-R style encoder, random weights; hidden=%d layers=%d heads=%d intermediate=%d vocab=%d positions=%d layout=%s fp16=%t seed=%d",
		c.Size.Hidden, c.Size.Layers, c.Size.Heads, c.Size.Intermediate, c.VocabSize, c.Size.MaxPositions, c.Layout, c.FP16, c.Seed)
	if c.Attention != AttentionGenerator {
		doc += " attention=" + string(c.Attention)
	}
	var data []byte
	if c.ExternalData {
		data = externalData(&b.g)
	}
	return &Model{
		ONNX:          encodeModel(&b.g, "jetembed-genmodel", doc),
		Data:          data,
		SparseWeight:  w.sparseW,
		SparseBias:    w.sparseB,
		ColBERTWeight: w.colbertW,
		ColBERTBias:   w.colbertB,
	}, nil
}

// encoder adds embeddings and the transformer layers; it returns the name
// of the last hidden state [batch, seq, H].
func (b *builder) encoder(s Size, vocab int, w *weights) string {
	h, p := int64(s.Hidden), int64(s.MaxPositions)
	// XLM-R positions: cumsum(ids != pad) * (ids != pad) + pad, so the
	// first real token is at pad+1 and padding sits at pad.
	notPad := b.op("Cast", []attribute{intAttr("to", dtInt64)},
		b.op("Not", nil, b.op("Equal", nil, "input_ids", b.ints(true, PadID))))
	cum := b.op("CumSum", nil, notPad, b.ints(true, 1))
	pos := b.op("Add", nil, b.op("Mul", nil, cum, notPad), b.ints(true, PadID))

	word := b.op("Gather", nil, b.weight("embeddings.word_embeddings.weight", []int64{int64(vocab), h}, w.word), "input_ids")
	posEmb := b.op("Gather", nil, b.weight("embeddings.position_embeddings.weight", []int64{p, h}, w.pos), pos)
	x := b.op("Add", nil, b.op("Add", nil, word, posEmb), b.weight("embeddings.token_type_embeddings.weight", []int64{h}, w.tokType))
	x = b.layerNorm(x, b.weight("embeddings.LayerNorm.weight", []int64{h}, w.embLNg), b.weight("embeddings.LayerNorm.bias", []int64{h}, w.embLNb), layerNormEps)

	addMask := b.mask(b.attn)

	for i, l := range w.layers {
		x = b.layer(s, fmt.Sprintf("encoder.layer.%d.", i), x, addMask, l)
	}
	return x
}

// layer adds one post-LN transformer layer (BERT/XLM-R order).
func (b *builder) layer(s Size, prefix, x, addMask string, l layerWeights) string {
	h, in := int64(s.Hidden), int64(s.Intermediate)
	a, d := int64(s.Heads), int64(s.Hidden/s.Heads)
	wt := func(name string, dims []int64, v []float32) string { return b.weight(prefix+name, dims, v) }
	hh, hv := []int64{h, h}, []int64{h}

	var ctx string
	if b.attn == AttentionGenerator {
		split := b.ints(false, 0, 0, a, d) // Reshape: 0 copies batch and seq
		heads := func(t string, perm ...int64) string {
			return b.op("Transpose", []attribute{intsAttr("perm", perm...)}, b.op("Reshape", nil, t, split))
		}
		q := heads(b.linear(x, wt("attention.self.query.weight", hh, l.q), wt("attention.self.query.bias", hv, l.qb)), 0, 2, 1, 3)
		k := heads(b.linear(x, wt("attention.self.key.weight", hh, l.k), wt("attention.self.key.bias", hv, l.kb)), 0, 2, 3, 1)
		v := heads(b.linear(x, wt("attention.self.value.weight", hh, l.v), wt("attention.self.value.bias", hv, l.vb)), 0, 2, 1, 3)

		scores := b.op("Mul", nil, b.op("MatMul", nil, q, k), b.scalar(float32(1/math.Sqrt(float64(d)))))
		probs := b.op("Softmax", []attribute{intAttr("axis", -1)}, b.op("Add", nil, scores, addMask))
		ctx = b.op("Transpose", []attribute{intsAttr("perm", 0, 2, 1, 3)}, b.op("MatMul", nil, probs, v))
		ctx = b.op("Reshape", nil, ctx, b.ints(false, 0, 0, h))
	} else {
		q := b.linear(x, wt("attention.self.query.weight", hh, l.q), wt("attention.self.query.bias", hv, l.qb))
		k := b.linear(x, wt("attention.self.key.weight", hh, l.k), wt("attention.self.key.bias", hv, l.kb))
		v := b.linear(x, wt("attention.self.value.weight", hh, l.v), wt("attention.self.value.bias", hv, l.vb))
		ctx = b.attention(b.attn, s, q, k, v, addMask)
	}
	attn := b.linear(ctx, wt("attention.output.dense.weight", hh, l.o), wt("attention.output.dense.bias", hv, l.ob))
	x = b.layerNorm(b.op("Add", nil, x, attn), wt("attention.output.LayerNorm.weight", hv, l.ln1g), wt("attention.output.LayerNorm.bias", hv, l.ln1b), layerNormEps)

	f := b.gelu(b.linear(x, wt("intermediate.dense.weight", []int64{h, in}, l.ffnIn), wt("intermediate.dense.bias", []int64{in}, l.ffnInB)))
	f = b.linear(f, wt("output.dense.weight", []int64{in, h}, l.ffnOut), wt("output.dense.bias", hv, l.ffnOutB))
	return b.layerNorm(b.op("Add", nil, x, f), wt("output.LayerNorm.weight", hv, l.ln2g), wt("output.LayerNorm.bias", hv, l.ln2b), layerNormEps)
}

// heads adds BGE-M3's three heads as the community ONNX exports compute
// them: dense = normalize(h[:,0]); sparse = relu(sparse_linear(h));
// colbert = normalize(colbert_linear(h[:,1:]) * mask[:,1:]).
func (b *builder) heads(hidden int, x string, w *weights) string {
	h := int64(hidden)
	cls := b.op("Gather", []attribute{intAttr("axis", 1)}, x, b.ints(true, 0))
	b.opTo("dense_vecs", "Identity", nil, b.l2Normalize(cls))

	sw := b.weight("sparse_linear.weight", []int64{h, 1}, w.sparseW) // [1,H] transposed is the same bytes
	sb := b.weight("sparse_linear.bias", []int64{1}, w.sparseB)
	b.opTo("sparse_vecs", "Relu", nil, b.linear(x, sw, sb))

	maxEnd := int64(math.MaxInt64)
	rest := b.op("Slice", nil, x, b.ints(false, 1), b.ints(false, maxEnd), b.ints(false, 1))
	cw := b.weight("colbert_linear.weight", []int64{h, h}, transpose(w.colbertW, hidden, hidden))
	cb := b.weight("colbert_linear.bias", []int64{h}, w.colbertB)
	maskF := b.op("Cast", []attribute{intAttr("to", dtFloat)}, "attention_mask")
	maskRest := b.op("Unsqueeze", nil, b.op("Slice", nil, maskF, b.ints(false, 1), b.ints(false, maxEnd), b.ints(false, 1)), b.ints(false, 2))
	col := b.op("Mul", nil, b.linear(rest, cw, cb), maskRest)
	return b.opTo("colbert_vecs", "Identity", nil, b.l2Normalize(col))
}

// all lists every parameter slice, for in-place rounding.
func (w *weights) all() [][]float32 {
	out := [][]float32{w.word, w.pos, w.tokType, w.embLNg, w.embLNb, w.sparseW, w.sparseB, w.colbertW, w.colbertB}
	for _, l := range w.layers {
		out = append(out, l.q, l.k, l.v, l.o, l.qb, l.kb, l.vb, l.ob, l.ln1g, l.ln1b, l.ffnIn, l.ffnInB, l.ffnOut, l.ffnOutB, l.ln2g, l.ln2b)
	}
	return out
}
