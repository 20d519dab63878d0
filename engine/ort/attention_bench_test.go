//go:build cgo

package ort

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/internal/onnxgen"
)

// The attention classes benchmark (scripts/bench-attention.sh, make
// bench): for each shape and form, one child process opens the model, runs
// the shape, and reports the run
// time (the faster of two runs), the peak RSS growth over the RSS before
// them, and the share of a third, profiled, run spent in the attention
// blocks. It is skipped unless -attention.model is given.
var (
	classModel   = flag.String("attention.model", "", "model directory of the attention classes benchmark (empty: skipped)")
	classShapes  = flag.String("attention.shapes", "1x512,1x2048,1x5700,1x8192,4x2048", "BxS shapes; rows of a batch are padded, row r holding S-r*S/8 tokens")
	classThreads = flag.Int("attention.threads", 1, "intra-op threads")
	classM3      = flag.Bool("attention.m3", false, "also one attention layer at BGE-M3's size (hidden 1024, 16 heads) at 1x8192")
)

const classChildEnv = "JETEMBED_TEST_ATTENTION_CHILD"

// classResult is one child's measurement.
type classResult struct {
	Model          string
	Batch, Seq     int
	Form           string
	Run            time.Duration
	AttentionShare float64
	PeakGrowth     int64
	Err            string `json:",omitempty"`
}

func TestAttentionClasses(t *testing.T) {
	if spec := os.Getenv(classChildEnv); spec != "" {
		classChild(t, spec)
		return
	}
	if *classModel == "" {
		t.Skip("the attention classes benchmark runs with -attention.model DIR (scripts/bench-attention.sh)")
	}
	initORT(t)
	type job struct {
		dir, label string
		b, s       int
	}
	var jobs []job
	for _, sh := range strings.Split(*classShapes, ",") {
		b, s, ok := strings.Cut(strings.TrimSpace(sh), "x")
		bi, err1 := strconv.Atoi(b)
		si, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || bi < 1 || si < 2 {
			t.Fatalf("shape %q (want BxS)", sh)
		}
		jobs = append(jobs, job{*classModel, filepath.Base(*classModel), bi, si})
	}
	if *classM3 {
		dir := filepath.Join(t.TempDir(), "m3-layer")
		tok, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram.json"))
		must(t, err)
		c := onnxgen.Config{Size: onnxgen.Size{Hidden: 1024, Layers: 1, Heads: 16, Intermediate: 4096, MaxPositions: 8194}, Layout: onnxgen.LayoutHidden, Seed: 1}
		must(t, onnxgen.WriteDir(dir, c, tok))
		jobs = append(jobs, job{dir, "BGE-M3 size, 1 layer", 1, 8192})
	}
	var results []classResult
	for _, j := range jobs {
		for _, form := range []Attention{AttentionGraph, AttentionFused} {
			spec, _ := json.Marshal(classResult{Model: j.dir, Batch: j.b, Seq: j.s, Form: string(form)})
			cmd := exec.Command(os.Args[0], "-test.run=^TestAttentionClasses$", "-attention.threads="+strconv.Itoa(*classThreads))
			cmd.Env = append(os.Environ(), classChildEnv+"="+string(spec))
			out, err := cmd.CombinedOutput()
			r := classResult{Model: j.label, Batch: j.b, Seq: j.s, Form: string(form)}
			if i := strings.LastIndex(string(out), "RESULT "); err == nil && i >= 0 {
				line, _, _ := strings.Cut(string(out[i+len("RESULT "):]), "\n")
				must(t, json.Unmarshal([]byte(line), &r))
				r.Model = j.label
			} else {
				r.Err = fmt.Sprintf("%v: %s", err, lastLine(string(out)))
			}
			t.Logf("%s %dx%d %s: %v, attention %.0f%%, peak +%d MiB %s", r.Model, r.Batch, r.Seq, r.Form, r.Run, 100*r.AttentionShare, r.PeakGrowth>>20, r.Err)
			results = append(results, r)
		}
	}
	fmt.Print(classTable(results))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// classTable is the Markdown table scripts/bench-attention.sh prints.
func classTable(rs []classResult) string {
	var b strings.Builder
	b.WriteString("| Model | Shape | Run s, graph / fused | Speed-up | Attention share of the run, graph / fused | Peak RSS growth, graph / fused |\n|---|---|---|---|---|---|\n")
	for i := 0; i+1 < len(rs); i += 2 {
		g, f := rs[i], rs[i+1]
		shape := fmt.Sprintf("%dx%d", g.Batch, g.Seq)
		if g.Batch > 1 {
			shape += " padded"
		}
		if g.Err != "" || f.Err != "" {
			fmt.Fprintf(&b, "| %s | %s | failed: %s | | | |\n", g.Model, shape, cmp.Or(g.Err, f.Err))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f / %.3f | %.2fx | %.0f%% / %.0f%% | %d / %d MiB |\n", g.Model, shape,
			g.Run.Seconds(), f.Run.Seconds(), g.Run.Seconds()/f.Run.Seconds(),
			100*g.AttentionShare, 100*f.AttentionShare, g.PeakGrowth>>20, f.PeakGrowth>>20)
	}
	return b.String()
}

// classChild measures one shape in one form (this process's whole life).
func classChild(t *testing.T, spec string) {
	var r classResult
	must(t, json.Unmarshal([]byte(spec), &r))
	initORT(t)
	m, err := model.Open(r.Model, model.Options{})
	must(t, err)
	p := Provider{IntraOpThreads: *classThreads, Attention: Attention(r.Form)}
	plan, err := PlanAttention(m, p)
	must(t, err)
	if plan.Fused != (p.Attention == AttentionFused) {
		t.Fatalf("plan %s", plan)
	}
	lens := make([]int, r.Batch)
	for i := range lens {
		lens[i] = r.Seq - i*r.Seq/8
	}
	in := input(r.Batch, r.Seq, lens)
	// Time and memory without the profiler, whose records take memory of
	// their own: the faster of two runs (the first of a shape allocates
	// what the second reuses), and the peak over the RSS before them.
	s, err := Open(m, p) // the canary's session, when fused
	must(t, err)
	_, err = s.Run(context.Background(), input(1, 16, []int{16}))
	must(t, err)
	before := resetPeak(t)
	for i := range 2 {
		start := time.Now()
		_, err = s.Run(context.Background(), in)
		must(t, err)
		if d := time.Since(start); i == 0 || d < r.Run {
			r.Run = d
		}
	}
	r.PeakGrowth = (statusKiB(t, "VmHWM") - before) << 10
	must(t, s.Close())
	// The attention share from one profiled run.
	prefix := filepath.Join(t.TempDir(), "profile")
	if s, err = newProfiled(m, p, plan.Fused, prefix); err != nil {
		t.Fatal(err)
	}
	_, err = s.Run(context.Background(), in)
	must(t, err)
	must(t, s.Close()) // writes the profile
	files, _ := filepath.Glob(prefix + "*.json")
	if len(files) != 1 {
		t.Fatalf("profiles %v", files)
	}
	if r.AttentionShare, err = attentionShare(files[0]); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", out)
}

// newProfiled opens m (rewritten or not), with ONNX Runtime's profiler
// writing to prefix when it is set.
func newProfiled(m *model.Model, p Provider, fused bool, prefix string) (*Session, error) {
	var rw *model.AttentionRewrite
	if fused {
		var err error
		if rw, err = model.RewriteAttention(m.ONNXPath, model.AttentionCPU); err != nil {
			return nil, err
		}
	}
	return newSession(m, p, func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error) {
		if prefix != "" {
			if err := so.EnableProfiling(prefix); err != nil {
				return nil, err
			}
		}
		if rw == nil {
			return ort.NewDynamicAdvancedSession(m.ONNXPath, inputs, outputs, so)
		}
		if err := so.AddSessionConfigEntry(folderKey, rw.DataDir); err != nil {
			return nil, err
		}
		return ort.NewDynamicAdvancedSessionWithONNXData(rw.ONNX, inputs, outputs, so)
	})
}

// attentionShare reads an ONNX Runtime profile and returns the part of the
// last run's node time spent in attention: MultiHeadAttention, and every
// node whose output has four axes (the head split, the scores, the
// softmax, the context before it is merged back).
func attentionShare(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var events []struct {
		Cat  string
		Name string
		TS   int64 `json:"ts"`
		Dur  int64 `json:"dur"`
		Args struct {
			OpName string                       `json:"op_name"`
			Output []map[string]json.RawMessage `json:"output_type_shape"`
		}
	}
	if err := json.Unmarshal(b, &events); err != nil {
		return 0, err
	}
	var runStart int64 = -1
	for _, e := range events {
		if e.Name == "model_run" {
			runStart = max(runStart, e.TS)
		}
	}
	var total, attn int64
	for _, e := range events {
		if e.Cat != "Node" || !strings.HasSuffix(e.Name, "_kernel_time") || e.TS < runStart {
			continue
		}
		total += e.Dur
		rank4 := false
		for _, o := range e.Args.Output {
			for _, dims := range o {
				var d []int64
				if json.Unmarshal(dims, &d) == nil && len(d) == 4 {
					rank4 = true
				}
			}
		}
		if e.Args.OpName == "MultiHeadAttention" || e.Args.OpName == "Softmax" || rank4 {
			attn += e.Dur
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("%s: no node events in the last run", path)
	}
	return float64(attn) / float64(total), nil
}
