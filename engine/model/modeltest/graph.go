package modeltest

import (
	"math"
	"strconv"

	"github.com/jetembed/jetembed/engine/model"
)

// ONNX returns s's graph. Both layouts compute the hidden state
// h = sin((input_ids/100 + attention_mask) * w + b), shape [batch, seq, H];
// the heads layout then applies the heads as BGE-M3 exports do, except that
// colbert_vecs are not masked (no normalization of all-zero rows).
func (s Spec) ONNX() []byte {
	g := &graph{}
	elem := int64(onnxInt64)
	if s.Int32 {
		elem = onnxInt32
	}
	g.inputs = []pb{
		valueInfo(model.InputIDs, elem, "batch", "seq"),
		valueInfo(model.InputMask, elem, "batch", "seq"),
	}
	h64 := int64(s.Hidden)
	g.initializers = []pb{
		floatTensor("w", []int64{h64}, s.hiddenW()),
		floatTensor("b", []int64{h64}, s.hiddenB()),
		floatTensor("id_scale", nil, []float32{0.01}),
		int64Tensor("last_axis", []int64{1}, []int64{-1}),
	}
	ids := g.add("Cast", []string{model.InputIDs}, "ids_f", intAttr("to", onnxFloat))
	mask := g.add("Cast", []string{model.InputMask}, "mask_f", intAttr("to", onnxFloat))
	x := g.add("Mul", []string{ids, "id_scale"}, "ids_scaled")
	x = g.add("Add", []string{x, mask}, "x")
	if s.TokenTypes {
		g.inputs = append(g.inputs, valueInfo(model.InputTokenType, elem, "batch", "seq"))
		tt := g.add("Cast", []string{model.InputTokenType}, "tt_f", intAttr("to", onnxFloat))
		x = g.add("Add", []string{x, tt}, "x_tt")
	}
	if s.Positions {
		g.inputs = append(g.inputs, valueInfo(model.InputPositions, elem, "batch", "seq"))
		g.initializers = append(g.initializers, floatTensor("pos_scale", nil, []float32{0.001}))
		pos := g.add("Cast", []string{model.InputPositions}, "pos_f", intAttr("to", onnxFloat))
		pos = g.add("Mul", []string{pos, "pos_scale"}, "pos_scaled")
		x = g.add("Add", []string{x, pos}, "x_pos")
	}
	x = g.add("Unsqueeze", []string{x, "last_axis"}, "x3")
	x = g.add("Mul", []string{x, "w"}, "xw")
	x = g.add("Add", []string{x, "b"}, "xwb")

	if s.Layers > 0 {
		g.initializers = append(g.initializers, floatTensor("layer_w", []int64{h64, h64}, ramp(s.Hidden*s.Hidden, -0.5, 1/float32(s.Hidden*s.Hidden))))
		for i := range s.Layers {
			x = g.add("MatMul", []string{x, "layer_w"}, "layer_mm"+strconv.Itoa(i))
			x = g.add("Sin", []string{x}, "layer"+strconv.Itoa(i))
		}
	}
	if s.Layout != model.LayoutHeads && s.SentenceTransformers {
		// The pooled output first, as if the graph's author listed it so:
		// jetembed must pick the hidden state by name, not by position.
		tok := g.add("Sin", []string{x}, model.OutputTokenEmbeddings)
		g.add("ReduceMean", []string{tok}, "sentence_embedding", intsAttr("axes", 1), intAttr("keepdims", 0))
		g.outputs = []pb{valueInfo("sentence_embedding", onnxFloat, "batch", s.Hidden),
			valueInfo(model.OutputTokenEmbeddings, onnxFloat, "batch", "seq", s.Hidden)}
		return g.model(s.Name)
	}
	if s.Layout != model.LayoutHeads {
		g.add("Sin", []string{x}, model.OutputHidden)
		g.outputs = []pb{valueInfo(model.OutputHidden, onnxFloat, "batch", "seq", s.Hidden)}
		return g.model(s.Name)
	}
	h := g.add("Sin", []string{x}, "hidden")
	c64 := int64(s.ColBERTDim)
	g.initializers = append(g.initializers,
		int64Tensor("zero", nil, []int64{0}),
		int64Tensor("one", []int64{1}, []int64{1}),
		int64Tensor("end", []int64{1}, []int64{math.MaxInt64}),
		floatTensor("sparse_w", []int64{h64, 1}, s.SparseW()), // [H,1] = weight^T
		floatTensor("sparse_b", []int64{1}, []float32{s.SparseB()}),
		floatTensor("colbert_w", []int64{h64, c64}, transpose(s.ColBERTW(), s.ColBERTDim, s.Hidden)),
		floatTensor("colbert_b", []int64{c64}, s.ColBERTB()),
	)
	cls := g.add("Gather", []string{h, "zero"}, "cls", intAttr("axis", 1))
	g.add("LpNormalization", []string{cls}, model.OutputDense, intAttr("axis", -1), intAttr("p", 2))

	sp := g.add("MatMul", []string{h, "sparse_w"}, "sparse_mm")
	sp = g.add("Add", []string{sp, "sparse_b"}, "sparse_lin")
	g.add("Relu", []string{sp}, model.OutputSparse)

	cb := g.add("Slice", []string{h, "one", "end", "one"}, "h_tail")
	cb = g.add("MatMul", []string{cb, "colbert_w"}, "colbert_mm")
	cb = g.add("Add", []string{cb, "colbert_b"}, "colbert_lin")
	g.add("LpNormalization", []string{cb}, model.OutputColBERT, intAttr("axis", -1), intAttr("p", 2))

	g.outputs = []pb{
		valueInfo(model.OutputDense, onnxFloat, "batch", s.Hidden),
		valueInfo(model.OutputSparse, onnxFloat, "batch", "seq", 1),
		valueInfo(model.OutputColBERT, onnxFloat, "batch", "seq_minus_1", s.ColBERTDim),
	}
	return g.model(s.Name)
}

// transpose turns a rows x cols row-major matrix into cols x rows.
func transpose(m []float32, rows, cols int) []float32 {
	out := make([]float32, len(m))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = m[r*cols+c]
		}
	}
	return out
}
