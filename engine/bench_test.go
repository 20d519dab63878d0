package engine_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

// benchModels are the committed tiny model and, when JETEMBED_BENCH_MODEL
// names one (e.g. `jetembed genmodel --size small`), a bigger one.
func benchModels(b *testing.B) map[string]*model.Model {
	initORT(b)
	ms := map[string]*model.Model{"tiny": openModel(b, "tiny-hidden")}
	if dir := os.Getenv("JETEMBED_BENCH_MODEL"); dir != "" {
		m, err := model.Open(dir, model.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		ms["bench"] = m
	}
	return ms
}

type hfTok struct{ t *tokenizer.Tokenizer }

func (h hfTok) Encode(text string, maxTokens int) ([]int32, int) {
	e := h.t.Encode(text, tokenizer.Options{AddSpecialTokens: true, MaxTokens: maxTokens})
	return e.IDs, e.Count
}

// mixTexts makes n texts of lognormal word counts (median ~60 words).
func mixTexts(n int) []engine.Text {
	r := rand.New(rand.NewPCG(5, 5))
	vocab := strings.Fields("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their")
	texts := make([]engine.Text, n)
	for i := range texts {
		words := min(max(int(math.Exp(4.1+0.9*r.NormFloat64())), 3), 1500)
		var sb strings.Builder
		for w := 0; w < words; w++ {
			sb.WriteString(vocab[r.IntN(len(vocab))])
			sb.WriteByte(' ')
		}
		texts[i] = engine.Text{Text: sb.String(), Outputs: engine.Dense | engine.Sparse, Truncate: true}
	}
	return texts
}

// BenchmarkEmbed is the engine's throughput on a realistic length mix,
// tokenizer and heads included, reported as real tokens per second.
func BenchmarkEmbed(b *testing.B) {
	for name, m := range benchModels(b) {
		tok, err := tokenizer.Load(m.TokenizerPath)
		if err != nil {
			b.Fatal(err)
		}
		e, err := engine.New(context.Background(), engine.Config{NoWarmup: true, MaxTokens: 2048}, hfTok{tok}, m,
			func(int) (engine.Runner, error) { return ort.Open(m, ort.Provider{IntraOpThreads: 1}) })
		if err != nil {
			b.Fatal(err)
		}
		texts := mixTexts(256)
		b.Run(name, func(b *testing.B) {
			var tokens, padded int
			for b.Loop() {
				_, rep, err := e.Embed(context.Background(), texts, engine.Call{})
				if err != nil {
					b.Fatal(err)
				}
				tokens += rep.Tokens
				padded += rep.PaddedTokens
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(tokens)/float64(padded), "real/padded")
		})
		e.Close()
	}
}

// BenchmarkEngineOverhead compares the engine with a bare session.Run loop
// on chunks that pack perfectly (every text exactly one tier long), so the
// difference is the engine's own cost: packing, scheduling, layout of the
// input and the heads (tokenization is a lookup here). The two alternate
// in one loop, so load from elsewhere on the machine hits both alike; the
// engine/bare metric is the ratio of their total times (goal <= 1.05).
func BenchmarkEngineOverhead(b *testing.B) {
	const batch, seq = 32, 128
	for name, m := range benchModels(b) {
		ids := make([]int32, seq)
		for j := range ids {
			ids[j] = int32(5 + j%50)
		}
		ids[0], ids[seq-1] = 0, 2
		texts := make([]engine.Text, batch)
		for i := range texts {
			texts[i] = engine.Text{Text: "x", Outputs: engine.Dense}
		}
		pre := engine.TokenizerFunc(func(string, int) ([]int32, int) { return ids, seq })
		in := engine.RunInput{Batch: batch, Seq: seq, IDs: make([]int64, batch*seq), Mask: make([]int64, batch*seq)}
		for i := range in.IDs {
			in.IDs[i], in.Mask[i] = int64(ids[i%seq]), 1
		}
		b.Run(name, func(b *testing.B) {
			s, err := ort.Open(m, ort.Provider{IntraOpThreads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			e, err := engine.New(context.Background(), engine.Config{Tiers: []int{seq}, MaxBatch: batch, MaxTokens: seq,
				Warmup: []engine.Shape{{Batch: batch, Seq: seq}}}, pre, m,
				func(int) (engine.Runner, error) { return ort.Open(m, ort.Provider{IntraOpThreads: 1}) })
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if _, err := s.Run(context.Background(), in); err != nil { // first run of the shape, as the engine's warm-up
				b.Fatal(err)
			}
			var bare, eng time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := s.Run(context.Background(), in); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				_, rep, err := e.Embed(context.Background(), texts, engine.Call{})
				if err != nil || len(rep.Chunks) != 1 {
					b.Fatalf("%v, %d chunks", err, len(rep.Chunks))
				}
				bare, eng = bare+t1.Sub(t0), eng+time.Since(t1)
			}
			b.ReportMetric(float64(batch*seq*b.N)/bare.Seconds(), "bare-tokens/s")
			b.ReportMetric(float64(batch*seq*b.N)/eng.Seconds(), "engine-tokens/s")
			b.ReportMetric(eng.Seconds()/bare.Seconds(), "engine/bare")
		})
	}
}
