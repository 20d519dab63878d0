package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// Int8Options says how [RewriteInt8] rewrites a graph.
type Int8Options struct {
	// Attention also fuses the attention blocks for Target, as
	// [RewriteAttention] does; a graph with none is quantized alone.
	Attention bool
	Target    AttentionTarget
	// KeepFP32, when set, is asked about every encoder linear layer (its
	// node name and weight initializer name); true keeps it in float32.
	KeepFP32 func(node, weight string) bool
	// Elementwise quantizes the activations with Div, Round, Add and Cast
	// instead of one per-row QuantizeLinear (graphs of opset < 13 always
	// do); for measuring the two forms.
	Elementwise bool
}

// Int8Rewrite is a model whose encoder linear layers run in int8: the
// weights quantized per output channel at load, the activations per token
// row as the graph runs.
type Int8Rewrite struct {
	// ONNX is the rewritten ModelProto; DataDir is where the external data
	// of the initializers it kept lives (see [AttentionRewrite]).
	ONNX    []byte
	DataDir string
	// Attention is the attention fusion's outcome when it was asked for:
	// nil when it was not, its counts and misses otherwise (Fused 0 when
	// the graph has no block it recognizes, AttentionErr saying why).
	Attention    *AttentionRewrite
	AttentionErr error
	// Linears counts the encoder's MatMul and Gemm nodes with a constant
	// weight, Quantized those rewritten; Kept names the ones left in
	// float32 and why.
	Linears, Quantized int
	Kept               []string
	// FP32Bytes and Int8Bytes are the quantized weights' size before
	// (as float32) and after (int8 values and float32 scales).
	FP32Bytes, Int8Bytes int64
}

// ErrNoLinear reports a graph the int8 rewrite cannot quantize: no
// encoder linear layer with a constant weight, or no LayerNorm to tell the
// encoder from the heads.
var ErrNoLinear = errors.New("model: no encoder linear layer to quantize")

// ErrQuantized reports a graph that is already quantized (it has
// MatMulInteger, QuantizeLinear or their contrib forms): it runs as it is.
var ErrQuantized = errors.New("model: the graph is already quantized")

// quantOps are the operators of an already-quantized graph.
var quantOps = []string{
	"MatMulInteger", "QLinearMatMul", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear",
	"DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "QAttention", "MatMulNBits", "DynamicQuantizeLSTM",
}

// layerNormOps mark the encoder: every encoder linear layer feeds one (the
// residual's LayerNorm), the heads after the last one do not. ReduceMean
// stands for a LayerNorm exported as its parts.
var layerNormOps = []string{
	"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
	"SkipSimplifiedLayerNormalization", "ReduceMean",
}

// Quantized reports whether the graph at path is already quantized.
func Quantized(path string) (bool, error) {
	f, err := readONNXFile(path)
	if err != nil {
		return false, err
	}
	return quantizedGraph(f.nodes), nil
}

func quantizedGraph(nodes []*pbNode) bool {
	for _, nd := range nodes {
		if slices.Contains(quantOps, nd.op) {
			return true
		}
	}
	return false
}

// quantScale is the largest int8 magnitude the rewrite uses: symmetric
// [-127, 127], so a value and its negation round alike.
const quantScale = 127

// rowFloor keeps a row of zeros (or of denormals) from a zero scale: its
// values quantize to 0 whatever the floor.
const rowFloor = 1e-30

// RewriteInt8 reads the ONNX model at path and quantizes every encoder
// linear layer (a MatMul or Gemm with a constant float weight, of a node
// upstream of a LayerNorm) to int8: the weight per output channel (its
// column's absolute max over 127) at load, the input per token row as the
// graph runs (the row's absolute max over 127, so a row's values never
// depend on the other rows of the batch), multiplied in integers by
// com.microsoft.MatMulIntegerToFloat (MLAS's u8s8 kernels, VNNI where the
// CPU has it) and scaled back by the row's scale. Embeddings, LayerNorm,
// attention and the heads (the linear layers after the last LayerNorm)
// stay float32. A graph already quantized fails with [ErrQuantized]; one
// with nothing to quantize with [ErrNoLinear].
func RewriteInt8(path string, o Int8Options) (*Int8Rewrite, error) {
	f, err := readONNXFile(path)
	if err != nil {
		return nil, err
	}
	if quantizedGraph(f.nodes) {
		return nil, fmt.Errorf("%w: %s", ErrQuantized, path)
	}
	res := &Int8Rewrite{DataDir: filepath.Dir(path)}
	nodes := f.nodes
	var e *emitter
	if o.Attention {
		ar, fusedNodes, fe, err := fuseAttention(f, o.Target)
		switch {
		case err == nil:
			nodes, e = fusedNodes, fe
		case errors.Is(err, ErrNoAttention):
			res.AttentionErr = err
		default:
			return nil, err
		}
		if ar == nil {
			ar = &AttentionRewrite{DataDir: res.DataDir}
		}
		res.Attention = ar
	}
	if e == nil {
		e = newEmitter(newIndex(f))
	}
	e.prefix = "jetembed_int8/"
	q := &quantizer{f: f, e: e, o: o, acts: map[string]quantAct{}}
	if nodes, err = q.rewrite(nodes, res); err != nil {
		return nil, err
	}
	nodes = prune(nodes, f.outputs)
	if res.ONNX, err = encodeRewrite(f, nodes, e.inits); err != nil {
		return nil, err
	}
	return res, nil
}

// quantizer rewrites the linear layers of one graph.
type quantizer struct {
	f    *onnxFile
	e    *emitter
	o    Int8Options
	acts map[string]quantAct // quantized activations, by the float input
}

// quantAct is an activation quantized per row: q its uint8 values (zero
// point 128), scale its per-row scale shaped to broadcast over the
// MatMul's output ([..., 1]).
type quantAct struct{ q, scale string }

// linear is a MatMul or Gemm the rewrite may quantize.
type linear struct {
	x, w, bias string // bias only for Gemm
	transB     bool
	weight     *pbTensor
}

func (q *quantizer) rewrite(nodes []*pbNode, res *Int8Rewrite) ([]*pbNode, error) {
	producer := map[string]*pbNode{}
	for _, nd := range nodes {
		for _, o := range nd.outputs {
			producer[o] = nd
		}
	}
	var seeds []string
	for _, nd := range nodes {
		if slices.Contains(layerNormOps, nd.op) {
			seeds = append(seeds, nd.inputs...)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: %s: no LayerNormalization (or ReduceMean) to tell the encoder from the heads", ErrNoLinear, q.f.path)
	}
	encoder := upstream(nodes, seeds)
	inits := map[string]*pbTensor{}
	for _, t := range q.f.inits {
		inits[t.name] = t
	}
	out := make([]*pbNode, 0, len(nodes))
	for _, nd := range nodes {
		l, ok := q.match(nd, producer, inits)
		if !ok || !encoder[nd.outputs[0]] {
			out = append(out, nd)
			continue
		}
		res.Linears++
		if q.o.KeepFP32 != nil && q.o.KeepFP32(nd.name, l.weight.name) {
			res.Kept = append(res.Kept, fmt.Sprintf("%s (weight %s): kept in float32 as asked", nodeName(nd, -1), l.weight.name))
			out = append(out, nd)
			continue
		}
		repl, fp32, int8, err := q.quantize(nd, l)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %w", ErrInvalid, q.f.path, nodeName(nd, -1), err)
		}
		res.Quantized++
		res.FP32Bytes += fp32
		res.Int8Bytes += int8
		out = append(out, repl...)
	}
	if res.Quantized == 0 {
		why := "no MatMul or Gemm with a constant float weight upstream of a LayerNorm"
		if len(res.Kept) > 0 {
			why = "every one kept in float32"
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrNoLinear, q.f.path, why)
	}
	return out, nil
}

// match recognizes a linear layer: MatMul(x, W) or Gemm(x, W[, C]) with
// alpha = beta = 1 and no transA, W a 2-D float (or float16 cast to
// float) initializer.
func (q *quantizer) match(nd *pbNode, producer map[string]*pbNode, inits map[string]*pbTensor) (linear, bool) {
	if nd.domain != "" && nd.domain != "ai.onnx" || len(nd.outputs) != 1 {
		return linear{}, false
	}
	var l linear
	switch nd.op {
	case "MatMul":
		if len(nd.inputs) != 2 {
			return linear{}, false
		}
	case "Gemm":
		if len(nd.inputs) < 2 || len(nd.inputs) > 3 || nd.intAttr("transA", 0) != 0 {
			return linear{}, false
		}
		for _, name := range []string{"alpha", "beta"} {
			if a, ok := nd.attr(name); ok && a.f != 1 {
				return linear{}, false
			}
		}
		l.transB = nd.intAttr("transB", 0) != 0
		l.bias = nd.input(2)
	default:
		return linear{}, false
	}
	l.x, l.w = nd.inputs[0], nd.inputs[1]
	name := l.w
	if p, ok := producer[name]; ok {
		// A float16 weight is a Cast of its initializer to float.
		if p.op != "Cast" || p.domain != "" && p.domain != "ai.onnx" || p.intAttr("to", 0) != dtFloat || len(p.inputs) != 1 {
			return linear{}, false
		}
		name = p.inputs[0]
		if _, made := producer[name]; made {
			return linear{}, false
		}
	}
	t, ok := inits[name]
	if !ok || len(t.dims) != 2 || t.dims[0] <= 0 || t.dims[1] <= 0 || (t.dtype != dtFloat && t.dtype != dtFloat16) {
		return linear{}, false
	}
	l.weight = t
	return l, true
}

// quantize emits the int8 form of nd; it returns its nodes and the
// weight's bytes before and after.
func (q *quantizer) quantize(nd *pbNode, l linear) ([]*pbNode, int64, int64, error) {
	w, err := q.f.tensorFloats(l.weight)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("weight %s: %w", l.weight.name, err)
	}
	k, n := int(l.weight.dims[0]), int(l.weight.dims[1])
	if l.transB {
		k, n = n, k
	}
	wq, scales := quantizeColumns(w, k, n, l.transB)
	e := q.e
	var nodes []*pbNode
	e.cur = &nodes
	defer func() { e.cur = &e.pre }()

	qw := &pbTensor{name: e.fresh(l.weight.name + "_int8"), dims: []int64{int64(k), int64(n)}, dtype: dtInt8, hasData: true, data: wq}
	sc := &pbTensor{name: e.fresh(l.weight.name + "_scale"), dims: []int64{int64(n)}, dtype: dtFloat, hasData: true}
	for _, s := range scales {
		sc.data = binary.LittleEndian.AppendUint32(sc.data, math.Float32bits(s))
	}
	e.inits = append(e.inits, qw, sc)

	a := q.activation(l.x, int64(k))
	zp := q.zeroPoint()
	y := e.opIn(mhaDomain, "MatMulIntegerToFloat", nil, a.q, qw.name, e.floats(nil, 1), sc.name, zp)
	if l.bias == "" {
		e.opTo(nd.outputs[0], "", "Mul", nil, y, a.scale)
	} else {
		e.opTo(nd.outputs[0], "", "Add", nil, e.op("Mul", nil, y, a.scale), l.bias)
	}
	return nodes, int64(4 * k * n), int64(k*n + 4*n), nil
}

// activation quantizes x per row of its last axis (k values): the row's
// absolute max / 127 is its scale, x / scale rounded (half to even) plus
// 128 its uint8 values. Every linear layer reading x shares it (a layer's
// query, key and value projections).
func (q *quantizer) activation(x string, k int64) quantAct {
	if a, ok := q.acts[x]; ok {
		return a
	}
	e := q.e
	// max |x| as max(max x, -min x): two reductions that read x, rather
	// than an Abs that writes a copy of it.
	amax := e.op("Max", nil, e.reduce1("ReduceMax", x), e.op("Neg", nil, e.reduce1("ReduceMin", x)))
	scale := e.op("Mul", nil, e.op("Max", nil, amax, e.floats(nil, rowFloor)), e.floats(nil, 1.0/quantScale))
	xs := e.op("Div", nil, x, scale)
	var qx string
	if q.o.Elementwise || e.g.opset < 13 {
		r := e.op("Round", nil, xs)
		qx = e.op("Cast", []pbAttr{intA("to", dtUint8)}, e.op("Add", nil, r, e.floats(nil, 128)))
	} else {
		// x / scale is in [-127, 127]: QuantizeLinear of scale 1 and
		// zero point 128 rounds it (half to even), adds 128 and casts
		// in one pass.
		qx = e.op("QuantizeLinear", nil, xs, e.floats(nil, 1), q.zeroPoint())
	}
	a := quantAct{q: qx, scale: scale}
	q.acts[x] = a
	return a
}

// zeroPoint is the activations' zero point, 128 as a uint8 scalar.
func (q *quantizer) zeroPoint() string {
	return q.e.once("zp128", func() string { return q.e.uint8s(nil, 128) })
}

func (e *emitter) uint8s(dims []int64, v ...byte) string {
	t := &pbTensor{name: e.fresh("const"), dims: dims, dtype: dtUint8, hasData: true, data: append([]byte(nil), v...)}
	e.inits = append(e.inits, t)
	return t.name
}

// reduce1 is ReduceMax or ReduceMin over the last axis, kept.
func (e *emitter) reduce1(op, x string) string {
	attrs := []pbAttr{intA("keepdims", 1)}
	if e.g.opset >= 18 {
		return e.op(op, attrs, x, e.ints(-1))
	}
	return e.op(op, append(attrs, pbAttr{name: "axes", typ: attrInts, ints: []int64{-1}}), x)
}

// quantizeColumns quantizes a [k, n] weight (stored [n, k] when trans)
// per column: scale = max |w| / 127, values round(w / scale) in
// [-127, 127], written [k, n] row-major.
func quantizeColumns(w []float32, k, n int, trans bool) ([]byte, []float32) {
	at := func(r, c int) float32 {
		if trans {
			return w[c*k+r]
		}
		return w[r*n+c]
	}
	scales := make([]float32, n)
	for c := range n {
		var m float32
		for r := range k {
			m = max(m, float32(math.Abs(float64(at(r, c)))))
		}
		scales[c] = m / quantScale
		if scales[c] == 0 || math.IsInf(float64(scales[c]), 0) || math.IsNaN(float64(scales[c])) {
			scales[c] = 1
		}
	}
	out := make([]byte, k*n)
	for r := range k {
		for c := range n {
			v := math.RoundToEven(float64(at(r, c)) / float64(scales[c]))
			v = max(-quantScale, min(quantScale, v))
			out[r*n+c] = byte(int8(v))
		}
	}
	return out, scales
}

// upstream returns the values the seeds are computed from (the seeds
// included), through nodes in any order.
func upstream(nodes []*pbNode, seeds []string) map[string]bool {
	need := map[string]bool{}
	for _, s := range seeds {
		need[s] = true
	}
	done := make([]bool, len(nodes))
	for changed := true; changed; {
		changed = false
		for i := len(nodes) - 1; i >= 0; i-- {
			if done[i] {
				continue
			}
			for _, o := range nodes[i].outputs {
				if need[o] {
					done[i], changed = true, true
					break
				}
			}
			if done[i] {
				for _, in := range nodes[i].inputs {
					need[in] = true
				}
			}
		}
	}
	return need
}

// Int8Summary is one line for the start-up log.
func (r *Int8Rewrite) Int8Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d encoder linear layers in int8 (weights %.1f -> %.1f MiB)", r.Quantized, r.Linears,
		float64(r.FP32Bytes)/(1<<20), float64(r.Int8Bytes)/(1<<20))
	if len(r.Kept) > 0 {
		fmt.Fprintf(&b, "; float32: %s", r.Kept[0])
		if len(r.Kept) > 1 {
			fmt.Fprintf(&b, " (and %d more)", len(r.Kept)-1)
		}
	}
	return b.String()
}
