package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jetembed/jetembed/internal/onnxgen"
)

func genONNX(t testing.TB, c onnxgen.Config) string {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := onnxgen.WriteDir(dir, c, tok); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, ONNXFile)
}

// reread parses a rewritten model back, the way the rewrite reads files.
func reread(t *testing.T, rw *AttentionRewrite) *onnxFile {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rewritten.onnx")
	if err := os.WriteFile(p, rw.ONNX, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := readONNXFile(p)
	if err != nil {
		t.Fatalf("the rewritten model does not parse: %v", err)
	}
	return f
}

// checkWellFormed fails when a node reads a value nothing defines.
func checkWellFormed(t *testing.T, f *onnxFile) {
	t.Helper()
	defined := map[string]bool{"": true}
	for _, in := range f.inputs {
		defined[in.name] = true
	}
	for _, i := range f.inits {
		defined[i.name] = true
	}
	for _, nd := range f.nodes {
		for _, in := range append(append([]string{}, nd.inputs...), nd.subInputs...) {
			if !defined[in] && !strings.HasPrefix(in, "jetembed_attention/") {
				t.Errorf("node %s (%s) reads %q, defined by no earlier node", nd.name, nd.op, in)
			}
		}
		for _, o := range nd.outputs {
			defined[o] = true
		}
	}
	for _, o := range f.outputs {
		if !defined[o] {
			t.Errorf("graph output %q is computed by no node", o)
		}
	}
}

// TestRewriteAttentionPatterns rewrites generated models in every
// attention pattern (the generator's, HF eager, SDPA), both layouts,
// float16 weights and external data, for both targets.
func TestRewriteAttentionPatterns(t *testing.T) {
	for _, pattern := range []onnxgen.Attention{onnxgen.AttentionGenerator, onnxgen.AttentionEager, onnxgen.AttentionSDPA} {
		for _, c := range []onnxgen.Config{
			{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden},
			{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHeads, FP16: true},
			{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, ExternalData: true},
		} {
			c.Attention, c.Seed = pattern, 1
			path := genONNX(t, c)
			for _, target := range []AttentionTarget{AttentionCPU, AttentionCUDA} {
				name := fmt.Sprintf("%q/%s/fp16=%t/external=%t/%s", pattern, c.Layout, c.FP16, c.ExternalData, target)
				t.Run(name, func(t *testing.T) {
					rw, err := RewriteAttention(path, target)
					if err != nil {
						t.Fatal(err)
					}
					if rw.Fused != 2 || rw.Blocks != 2 || len(rw.Missed) > 0 || rw.DataDir != filepath.Dir(path) {
						t.Fatalf("fused %d of %d, missed %v, data dir %s", rw.Fused, rw.Blocks, rw.Missed, rw.DataDir)
					}
					if c.ExternalData && len(rw.ONNX) > 64<<10 {
						t.Errorf("external data model rewritten to %d bytes: the weights were copied in", len(rw.ONNX))
					}
					f := reread(t, rw)
					checkWellFormed(t, f)
					if f.opsets[mhaDomain] != 1 || f.opsets[""] != 17 {
						t.Errorf("opsets %v", f.opsets)
					}
					mha, ifs := 0, 0
					for _, nd := range f.nodes {
						switch {
						case nd.op == "MultiHeadAttention" && nd.domain == mhaDomain:
							mha++
							if nd.intAttr("num_heads", 0) != 4 {
								t.Errorf("num_heads %d", nd.intAttr("num_heads", 0))
							}
							if a, _ := nd.attr("scale"); math.Abs(float64(a.f)-1/math.Sqrt(8)) > 1e-7 {
								t.Errorf("scale %g, want 1/sqrt(8)", a.f)
							}
						case nd.op == "If":
							ifs++
						case nd.op == "Softmax", nd.op == "Where", nd.op == "Sub" && !strings.HasPrefix(nd.name, "jetembed_attention/"):
							t.Errorf("%s %s left: the old block or its mask was not pruned", nd.op, nd.name)
						}
					}
					if target == AttentionCPU && (mha != 2 || ifs != 0) || target == AttentionCUDA && (mha != 0 || ifs != 2) {
						t.Errorf("%d MultiHeadAttention and %d If nodes", mha, ifs)
					}
					ext := 0
					for _, init := range f.inits {
						if init.external {
							ext++
						}
					}
					if c.ExternalData != (ext > 0) {
						t.Errorf("%d external initializers", ext)
					}
				})
			}
		}
	}
}

// miniGraph builds one attention block by hand, for the cases a generator
// does not write.
type miniGraph struct {
	nodes   []*pbNode
	inits   []*pbTensor
	inputs  []string
	outputs []string
	n       int
}

func (g *miniGraph) op(op string, attrs []pbAttr, in ...string) string {
	g.n++
	out := fmt.Sprintf("%s_%d", op, g.n)
	g.nodes = append(g.nodes, &pbNode{op: op, name: out, inputs: in, outputs: []string{out}, attrs: attrs})
	return out
}

func (g *miniGraph) tensor(dtype int32, dims []int64, data []byte) string {
	g.n++
	name := fmt.Sprintf("init_%d", g.n)
	g.inits = append(g.inits, &pbTensor{name: name, dims: dims, dtype: dtype, data: data, hasData: true})
	return name
}

func (g *miniGraph) ints(v ...int64) string {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return g.tensor(dtInt64, []int64{int64(len(v))}, b)
}

func (g *miniGraph) floats(dims []int64, n int) string {
	var b []byte
	for i := range n {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(i%7)/7-0.4))
	}
	return g.tensor(dtFloat, dims, b)
}

func permA(p ...int64) []pbAttr { return []pbAttr{{name: "perm", typ: attrInts, ints: p}} }

// attnSpec varies the hand-built block.
type attnSpec struct {
	softmaxAxis int64
	keyPerm     []int64
	maskFrom    string // "mask" (attention_mask), "bias" (a learned [1,2,1,16] bias), "none"
	probsOut    bool   // the probabilities are a graph output too
	noMaskInput bool
	fp16        bool // the block computes in float16 (weights and activations)
}

func (s attnSpec) write(t *testing.T) string {
	g := &miniGraph{inputs: []string{InputIDs, InputMask}}
	if s.noMaskInput {
		g.inputs = g.inputs[:1]
	}
	x := g.op("Gather", nil, g.floats([]int64{10, 8}, 80), InputIDs)
	weight := func() string { return g.floats([]int64{8, 8}, 64) }
	if s.fp16 {
		x = g.op("Cast", []pbAttr{intA("to", dtFloat16)}, x)
		weight = func() string { return g.tensor(dtFloat16, []int64{8, 8}, make([]byte, 128)) }
	}
	split := g.ints(0, 0, 2, 4)
	heads := func(w string, perm ...int64) string {
		return g.op("Transpose", permA(perm...), g.op("Reshape", nil, g.op("MatMul", nil, x, w), split))
	}
	q := heads(weight(), 0, 2, 1, 3)
	k := heads(weight(), s.keyPerm...)
	v := heads(weight(), 0, 2, 1, 3)
	scores := g.op("Div", nil, g.op("MatMul", nil, q, k), g.tensor(dtFloat, nil, binary.LittleEndian.AppendUint32(nil, math.Float32bits(2))))
	switch s.maskFrom {
	case "mask":
		src := InputMask
		if s.noMaskInput {
			src = InputIDs
		}
		m := g.op("Cast", []pbAttr{intA("to", dtFloat)}, src)
		m = g.op("Mul", nil, g.op("Sub", nil, g.floats(nil, 1), m), g.floats(nil, 1))
		scores = g.op("Add", nil, scores, g.op("Unsqueeze", nil, m, g.ints(1, 2)))
	case "bias":
		scores = g.op("Add", nil, scores, g.floats([]int64{1, 2, 1, 16}, 32))
	}
	probs := g.op("Softmax", []pbAttr{intA("axis", s.softmaxAxis)}, scores)
	ctx := g.op("Transpose", permA(0, 2, 1, 3), g.op("MatMul", nil, probs, v))
	out := g.op("Reshape", nil, ctx, g.ints(0, 0, 8))
	g.nodes[len(g.nodes)-1].outputs[0] = OutputHidden
	_ = out
	g.outputs = []string{OutputHidden}
	if s.probsOut {
		g.outputs = append(g.outputs, probs)
	}
	return g.save(t)
}

// save writes the graph as a ModelProto of opset 17.
func (g *miniGraph) save(t *testing.T) string {
	var gb []byte
	for _, nd := range g.nodes {
		gb = protowire.AppendTag(gb, fieldNode, protowire.BytesType)
		gb = protowire.AppendBytes(gb, nd.encode())
	}
	gb = appendStr(gb, 2, "mini")
	for _, it := range g.inits {
		gb = protowire.AppendTag(gb, fieldInitializer, protowire.BytesType)
		gb = protowire.AppendBytes(gb, it.encode())
	}
	vi := func(num protowire.Number, name string) {
		gb = protowire.AppendTag(gb, num, protowire.BytesType)
		gb = protowire.AppendBytes(gb, appendStr(nil, 1, name))
	}
	for _, in := range g.inputs {
		vi(graphInput, in)
	}
	for _, o := range g.outputs {
		vi(graphOutput, o)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 8)
	b = protowire.AppendTag(b, modelGraph, protowire.BytesType)
	b = protowire.AppendBytes(b, gb)
	var op []byte
	op = protowire.AppendTag(op, 2, protowire.VarintType)
	op = protowire.AppendVarint(op, 17)
	b = protowire.AppendTag(b, fieldOpset, protowire.BytesType)
	b = protowire.AppendBytes(b, op)
	p := filepath.Join(t.TempDir(), "mini.onnx")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRewriteAttentionMisses: a softmax that is not a padding-masked
// self-attention block stays, and the error says why.
func TestRewriteAttentionMisses(t *testing.T) {
	base := attnSpec{softmaxAxis: -1, keyPerm: []int64{0, 2, 3, 1}, maskFrom: "mask"}
	rw, err := RewriteAttention(base.write(t), AttentionCPU)
	if err != nil || rw.Fused != 1 {
		t.Fatalf("the base block: %v, %+v", err, rw)
	}
	for _, tc := range []struct {
		name string
		mod  func(*attnSpec)
		want string
	}{
		{"softmax over the heads", func(s *attnSpec) { s.softmaxAxis = 1 }, "axis 1"},
		{"keys not transposed", func(s *attnSpec) { s.keyPerm = []int64{0, 2, 1, 3} }, "transposed keys"},
		{"a learned bias", func(s *attnSpec) { s.maskFrom = "bias" }, "initializer"},
		{"probabilities read outside", func(s *attnSpec) { s.probsOut = true }, "other consumers"},
		{"mask from the ids", func(s *attnSpec) { s.noMaskInput = true }, "input input_ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mod(&s)
			_, err := RewriteAttention(s.write(t), AttentionCPU)
			if !errors.Is(err, ErrNoAttention) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrNoAttention saying %q", err, tc.want)
			}
		})
	}
	// Without a mask the block needs no padding input: it becomes one
	// MultiHeadAttention without the folded columns.
	unmasked := base
	unmasked.maskFrom, unmasked.noMaskInput = "none", true
	rw, err = RewriteAttention(unmasked.write(t), AttentionCPU)
	if err != nil || rw.Fused != 1 {
		t.Fatalf("unmasked block: %v", err)
	}
	for _, nd := range reread(t, rw).nodes {
		if nd.op == "Concat" || nd.op == "Expand" {
			t.Errorf("unmasked block got a padding column (%s)", nd.op)
		}
	}
}

// TestRewriteAttentionFloat16: a block that computes in float16 (an
// export converted with its inputs and outputs kept float32) runs
// MultiHeadAttention in float32, the only type of the CPU kernel, between
// Casts.
func TestRewriteAttentionFloat16(t *testing.T) {
	s := attnSpec{softmaxAxis: -1, keyPerm: []int64{0, 2, 3, 1}, maskFrom: "none", fp16: true}
	rw, err := RewriteAttention(s.write(t), AttentionCPU)
	if err != nil || rw.Fused != 1 {
		t.Fatalf("%v, %+v", err, rw)
	}
	f := reread(t, rw)
	checkWellFormed(t, f)
	producer := map[string]*pbNode{}
	for _, nd := range f.nodes {
		for _, o := range nd.outputs {
			producer[o] = nd
		}
	}
	castTo := func(name string) int64 {
		for range 3 { // through the Reshape to [B, S, N·d]
			nd := producer[name]
			if nd == nil {
				return -1
			}
			if nd.op == "Cast" {
				return nd.intAttr("to", -1)
			}
			name = nd.input(0)
		}
		return -1
	}
	for _, nd := range f.nodes {
		if nd.op != "MultiHeadAttention" {
			continue
		}
		for i, in := range nd.inputs[:3] {
			if to := castTo(in); to != dtFloat {
				t.Errorf("MultiHeadAttention input %d is not cast to float (cast to %d)", i, to)
			}
		}
		for _, c := range f.nodes {
			if c.op == "Cast" && c.input(0) == nd.outputs[0] && c.intAttr("to", -1) == dtFloat16 {
				return
			}
		}
		t.Error("MultiHeadAttention's output is not cast back to float16")
		return
	}
	t.Error("no MultiHeadAttention node")
}

// TestRewriteAttentionHostile: a damaged model.onnx is an error, never a
// panic or a rewrite.
func TestRewriteAttentionHostile(t *testing.T) {
	good, err := os.ReadFile(genONNX(t, onnxgen.Config{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Seed: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 7, 100, 4096, len(good) / 2, len(good) - 1} {
		p := filepath.Join(t.TempDir(), "model.onnx")
		if err := os.WriteFile(p, good[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := RewriteAttention(p, AttentionCPU); err == nil {
			t.Errorf("model truncated to %d bytes rewritten", n)
		}
	}
}

// FuzzRewriteAttention feeds damaged models to the rewrite; it must fail
// or produce a model that parses.
func FuzzRewriteAttention(f *testing.F) {
	good, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "tiny-hidden", ONNXFile))
	if err != nil {
		f.Fatal(err)
	}
	// The nodes come first in the generator's files; the weights after
	// them are what a mutation rarely needs to touch.
	f.Add(good[:min(len(good), 1<<14)])
	f.Add([]byte{0x3a, 0x05, 0x0a, 0x03, 0x0a, 0x01, 0x78})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "model.onnx")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rw, err := RewriteAttention(p, AttentionCPU)
		if err != nil {
			return
		}
		q := filepath.Join(t.TempDir(), "out.onnx")
		if err := os.WriteFile(q, rw.ONNX, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readONNXFile(q); err != nil {
			t.Errorf("rewrite of a %d-byte input does not parse: %v", len(b), err)
		}
	})
}
