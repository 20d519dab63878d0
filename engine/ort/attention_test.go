//go:build cgo

package ort

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/internal/onnxgen"
)

// resetPlans forgets the attention plans, so a test decides anew; it
// restores the hooks it may have replaced.
func resetPlans(t *testing.T) {
	t.Helper()
	clear := func() {
		plans.mu.Lock()
		for _, sp := range plans.spare {
			sp.s.Close()
		}
		plans.m, plans.spare = nil, nil
		plans.mu.Unlock()
	}
	clear()
	l2, rw, rw8 := l2CacheSize, rewrite, rewriteInt8
	t.Cleanup(func() {
		l2CacheSize, rewrite, rewriteInt8 = l2, rw, rw8
		clear()
	})
}

// genModel writes an onnxgen model directory for c.
func genModel(t testing.TB, c onnxgen.Config) string {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram.json"))
	must(t, err)
	dir := t.TempDir()
	must(t, onnxgen.WriteDir(dir, c, tok))
	return dir
}

// onnxFiles lists every ONNX graph committed under testdata/models.
func onnxFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	root := filepath.Join("..", "..", "testdata", "models")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".onnx") {
			out = append(out, p)
		}
		return err
	})
	must(t, err)
	if len(out) == 0 {
		t.Fatal("no committed .onnx under testdata/models")
	}
	return out
}

// graphRun runs the ONNX file's graph (or rw, when set) on a chunk with
// every input the graph declares: ids, mask, token types (zeros) and
// XLM-R position ids.
func graphRun(t *testing.T, path string, rw *model.AttentionRewrite, in engine.RunInput) [][]float32 {
	t.Helper()
	g, err := model.ReadGraph(path)
	must(t, err)
	so, err := ort.NewSessionOptions()
	must(t, err)
	defer so.Destroy()
	must(t, so.SetIntraOpNumThreads(1))
	var sess *ort.DynamicAdvancedSession
	if rw != nil {
		must(t, so.AddSessionConfigEntry(folderKey, rw.DataDir))
		sess, err = ort.NewDynamicAdvancedSessionWithONNXData(rw.ONNX, g.Inputs, g.Outputs, so)
	} else {
		sess, err = ort.NewDynamicAdvancedSession(path, g.Inputs, g.Outputs, so)
	}
	must(t, err)
	defer sess.Destroy()
	shape := ort.NewShape(int64(in.Batch), int64(in.Seq))
	var inputs []ort.Value
	for _, name := range g.Inputs {
		data := make([]int64, len(in.IDs))
		switch name {
		case model.InputIDs:
			copy(data, in.IDs)
		case model.InputMask:
			copy(data, in.Mask)
		case "position_ids":
			for r := range in.Batch {
				p := int64(1)
				for i := range in.Seq {
					if in.Mask[r*in.Seq+i] != 0 {
						p++
						data[r*in.Seq+i] = p
					} else {
						data[r*in.Seq+i] = 1
					}
				}
			}
		}
		v, err := ort.NewTensor(shape, data)
		must(t, err)
		defer v.Destroy()
		inputs = append(inputs, v)
	}
	outputs := make([]ort.Value, len(g.Outputs))
	must(t, sess.Run(inputs, outputs))
	var res [][]float32
	for _, o := range outputs {
		res = append(res, o.(*ort.Tensor[float32]).GetData())
		defer o.Destroy()
	}
	return res
}

// rewriteInputs are chunk shapes the rewrite must get right: one token,
// one text, padded rows of several lengths, a padded chunk whose rows
// are all full but one.
func rewriteInputs() []engine.RunInput {
	return []engine.RunInput{input(1, 1, []int{1}), input(1, 37, []int{37}), input(3, 23, []int{23, 9, 2}), input(2, 130, []int{130, 129})}
}

// TestAttentionRewriteEveryModel rewrites every committed ONNX graph for
// both targets and checks the rewrite computes what the graph does, at
// every position: the generated models and any export committed beside
// them (torch.onnx.export fixtures, external data, float16 weights).
func TestAttentionRewriteEveryModel(t *testing.T) {
	initORT(t)
	root := filepath.Join("..", "..", "testdata", "models")
	for _, path := range onnxFiles(t) {
		name, err := filepath.Rel(root, path)
		must(t, err)
		for _, target := range []model.AttentionTarget{model.AttentionCPU, model.AttentionCUDA} {
			t.Run(name+"/"+target.String(), func(t *testing.T) {
				rw, err := model.RewriteAttention(path, target)
				must(t, err)
				if rw.Fused == 0 || rw.Fused != rw.Blocks || len(rw.Missed) > 0 {
					t.Fatalf("fused %d of %d blocks: %v", rw.Fused, rw.Blocks, rw.Missed)
				}
				for _, in := range rewriteInputs() {
					want, got := graphRun(t, path, nil, in), graphRun(t, path, rw, in)
					for i := range want {
						if d := maxDiff(want[i], got[i]); !(d <= CanaryTolerance) {
							t.Errorf("%dx%d output %d: rewrite differs by %g", in.Batch, in.Seq, i, d)
						}
					}
				}
			})
		}
	}
}

// TestAttentionPatterns opens generated models in each attention pattern
// real exports have, in both layouts, float16 and external data among
// them: the plan fuses every block and sessions agree with the graph's.
func TestAttentionPatterns(t *testing.T) {
	initORT(t)
	for _, c := range []onnxgen.Config{
		{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Attention: onnxgen.AttentionEager, Seed: 3},
		{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHeads, Attention: onnxgen.AttentionEager, Seed: 3, FP16: true},
		{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Attention: onnxgen.AttentionSDPA, Seed: 4, ExternalData: true},
		{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHeads, Attention: onnxgen.AttentionSDPA, Seed: 4, FP16: true, ExternalData: true},
		{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Seed: 5, FP16: true, ExternalData: true},
	} {
		name := fmt.Sprintf("%s/%s/fp16=%t/external=%t", orGenerator(c.Attention), c.Layout, c.FP16, c.ExternalData)
		t.Run(name, func(t *testing.T) {
			resetPlans(t)
			m, err := model.Open(genModel(t, c), model.DefaultOptions())
			must(t, err)
			fused, err := Open(m, Provider{IntraOpThreads: 1, Attention: AttentionFused})
			must(t, err)
			defer fused.Close()
			plan := fused.Attention()
			if !plan.Fused || plan.FusedBlocks != onnxgen.Tiny.Layers || plan.Warn {
				t.Fatalf("plan %+v", plan)
			}
			graph, err := Open(m, Provider{IntraOpThreads: 1, Attention: AttentionGraph})
			must(t, err)
			defer graph.Close()
			if graph.Attention().Fused {
				t.Fatalf("--attention graph fused: %+v", graph.Attention())
			}
			for _, in := range rewriteInputs() {
				want, err := graph.Run(context.Background(), in)
				must(t, err)
				got, err := fused.Run(context.Background(), in)
				must(t, err)
				if d := outputDiff(want, got, in); !(d <= CanaryTolerance) {
					t.Errorf("%dx%d: fused differs from graph by %g", in.Batch, in.Seq, d)
				}
			}
		})
	}
}

func orGenerator(a onnxgen.Attention) string {
	if a == "" {
		return "generator"
	}
	return string(a)
}

// TestAttentionPlan covers what decides the form: the request, the
// provider, the flash conditions (L2 size, ORT_DISABLE_FLASH_ATTENTION)
// and a graph without attention.
func TestAttentionPlan(t *testing.T) {
	initORT(t)
	m, err := model.Open(testdataModel("tiny-hidden"), model.DefaultOptions())
	must(t, err)
	plan := func(t *testing.T, p Provider) AttentionPlan {
		t.Helper()
		pl, err := PlanAttention(m, p)
		must(t, err)
		t.Log(pl)
		return pl
	}
	t.Run("auto", func(t *testing.T) {
		resetPlans(t)
		pl := plan(t, Provider{})
		if !pl.Fused || pl.Warn || pl.Requested != AttentionAuto || pl.FusedBlocks != 2 || pl.CanaryDiff > CanaryTolerance {
			t.Errorf("plan %+v", pl)
		}
		// The first session is the canary's; a second is opened anew.
		plans.mu.Lock()
		spare := plans.spare[Provider{}.planKey(m)].s
		plans.mu.Unlock()
		first, err := Open(m, Provider{})
		must(t, err)
		defer first.Close()
		second, err := Open(m, Provider{})
		must(t, err)
		defer second.Close()
		if spare == nil || first != spare || second == spare || !second.Attention().Fused {
			t.Errorf("spare %p, sessions %p and %p", spare, first, second)
		}
	})
	t.Run("graph", func(t *testing.T) {
		resetPlans(t)
		if pl := plan(t, Provider{Attention: AttentionGraph}); pl.Fused || pl.Warn {
			t.Errorf("plan %+v", pl)
		}
	})
	t.Run("no L2 size", func(t *testing.T) {
		resetPlans(t)
		l2CacheSize = func() (int64, bool) { return 0, true }
		pl := plan(t, Provider{})
		if pl.Fused || !pl.Warn || !strings.Contains(pl.Note, "L2 cache size of 0") {
			t.Errorf("auto with no L2: plan %+v", pl)
		}
		pl = plan(t, Provider{Attention: AttentionFused})
		if !pl.Fused || !pl.Warn || !strings.Contains(pl.Note, "flash is off") {
			t.Errorf("fused with no L2: plan %+v", pl)
		}
	})
	t.Run("ORT_DISABLE_FLASH_ATTENTION", func(t *testing.T) {
		resetPlans(t)
		t.Setenv("ORT_DISABLE_FLASH_ATTENTION", "1")
		if pl := plan(t, Provider{}); pl.Fused || !pl.Warn || !strings.Contains(pl.Note, "ORT_DISABLE_FLASH_ATTENTION") {
			t.Errorf("plan %+v", pl)
		}
	})
	t.Run("tensorrt", func(t *testing.T) {
		if err := (Provider{Kind: TensorRT, Attention: AttentionFused}).Validate(); !errors.Is(err, ErrProvider) {
			t.Errorf("tensorrt with fused attention: %v", err)
		}
		if _, err := ParseAttention("flash"); err == nil {
			t.Errorf("ParseAttention(flash): %v", err)
		}
	})
	t.Run("no attention", func(t *testing.T) {
		resetPlans(t)
		sess, _ := openTiny(t, model.LayoutHidden, Provider{Attention: AttentionFused})
		if pl := sess.Attention(); pl.Fused || !pl.Warn || !strings.Contains(pl.Note, "no attention block") {
			t.Errorf("plan %+v", pl)
		}
	})
}

// TestAttentionCanaryDropsWrongRewrite breaks the rewrite (another
// model's weights): the canary sees it, and sessions run the graph.
func TestAttentionCanaryDropsWrongRewrite(t *testing.T) {
	initORT(t)
	resetPlans(t)
	other := genModel(t, onnxgen.Config{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Seed: 99})
	rewrite = func(string, model.AttentionTarget) (*model.AttentionRewrite, error) {
		return model.RewriteAttention(filepath.Join(other, model.ONNXFile), model.AttentionCPU)
	}
	sess, m := openDir(t, testdataModel("tiny-hidden"), Provider{IntraOpThreads: 1})
	pl := sess.Attention()
	if pl.Fused || !pl.Warn || !strings.Contains(pl.Note, "canary") || pl.CanaryDiff <= CanaryTolerance {
		t.Fatalf("plan %+v", pl)
	}
	// The session is the graph's: it agrees with a fresh graph session.
	graph, err := openGraph(m, Provider{IntraOpThreads: 1})
	must(t, err)
	defer graph.Close()
	in := input(2, 9, []int{9, 4})
	a, err := sess.Run(context.Background(), in)
	must(t, err)
	b, err := graph.Run(context.Background(), in)
	must(t, err)
	if d := outputDiff(a, b, in); d != 0 {
		t.Errorf("session differs from the graph by %g", d)
	}
}

// flashChild is set in the child process of TestAttentionFlashMemory.
const flashChild = "JETEMBED_TEST_FLASH_CHILD"

// TestAttentionFlashMemory checks that the fused form takes ORT's flash
// path: one 4096-token text on the tiny model adds a few MiB of peak
// memory, where the graph's four heads of 4096x4096 float scores alone
// are 256 MiB. Each form runs in a child process of its own, so each
// peak is its own.
func TestAttentionFlashMemory(t *testing.T) {
	if mode := os.Getenv(flashChild); mode != "" {
		flashChildRun(t, Attention(mode))
		return
	}
	initORT(t)
	peak := func(a Attention) int64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAttentionFlashMemory$", "-test.v")
		cmd.Env = append(os.Environ(), flashChild+"="+string(a))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %s: %v\n%s", a, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if _, v, ok := strings.Cut(line, "peak growth "); ok {
				n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				must(t, err)
				return n
			}
		}
		t.Fatalf("child %s printed no peak:\n%s", a, out)
		return 0
	}
	fused, graph := peak(AttentionFused), peak(AttentionGraph)
	t.Logf("peak growth of one 4096-token run: fused %d MiB, graph %d MiB", fused>>20, graph>>20)
	if graph < 256<<20 {
		t.Errorf("graph grew %d MiB, less than its scores: the test measures nothing", graph>>20)
	}
	if fused > 64<<20 {
		t.Errorf("fused grew %d MiB: the flash path was not taken", fused>>20)
	}
}

func flashChildRun(t *testing.T, a Attention) {
	initORT(t)
	sess, _ := openDir(t, testdataModel("tiny-hidden"), Provider{IntraOpThreads: 1, Attention: a})
	if sess.Attention().Fused != (a == AttentionFused) {
		t.Fatalf("plan %+v", sess.Attention())
	}
	const S = 4096
	in := input(1, S, []int{S})
	// A short run first: what a run of any length holds (the arena for
	// the hidden states, thread pools) is in the baseline.
	_, err := sess.Run(context.Background(), input(1, 64, []int{64}))
	must(t, err)
	before := resetPeak(t)
	_, err = sess.Run(context.Background(), in)
	must(t, err)
	after := statusKiB(t, "VmHWM")
	growth := (after - before) << 10
	// Outputs of one run are Go memory: 4096x32 floats, not the growth.
	fmt.Printf("peak growth %d bytes\n", max(growth, 0))
}

// resetPeak sets VmHWM back to the current RSS (Linux's clear_refs 5), so
// the peak read after a run is the run's and not the load's (the canary
// opens two sessions one after the other); it returns the RSS.
func resetPeak(t *testing.T) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): the peak may be the load's", err)
	}
	return statusKiB(t, "VmRSS")
}

func statusKiB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			must(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
