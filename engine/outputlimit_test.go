package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// TestOutputLimit: OutputBytes is exactly the dense and ColBERT values an
// Embed call returns, on both export layouts; under Call.OutputLimit a call
// whose vectors fit runs, and one a byte over is refused result_too_large
// before any session runs (the amplification of issue 21: a small job
// asking for a huge ColBERT result costs no compute).
func TestOutputLimit(t *testing.T) {
	initORT(t)
	for _, name := range []string{"tiny-hidden", "tiny-heads"} {
		t.Run(name, func(t *testing.T) {
			m := openModel(t, name)
			var runs atomic.Int64
			e, err := engine.New(context.Background(), engine.Config{MaxTokens: 64}, wordTok, m, func(int) (engine.Runner, error) {
				r, err := ort.Open(m, ort.Provider{IntraOpThreads: 1})
				return &fakes.Runner{Runner: r, Runs: &runs}, err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			texts := []engine.Text{
				{Text: sentence(10, 1), Outputs: all},
				{Text: sentence(200, 2), Outputs: engine.ColBERT, Truncate: true}, // cut to 64 tokens
				{Text: sentence(3, 3)},                                            // dense, the default
				{Text: sentence(5, 4), Outputs: engine.Sparse},
			}
			embs, _, err := e.Embed(context.Background(), texts, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			var want int64
			for i, emb := range embs {
				got := int64(len(emb.Dense)+len(emb.ColBERT)) * 4
				n := emb.Tokens
				if emb.Truncated {
					n = e.MaxTokens()
				}
				if est := e.OutputBytes(n, texts[i].Outputs); est != got {
					t.Errorf("text %d (%d tokens): OutputBytes %d, the vectors take %d", i, n, est, got)
				}
				want += got
			}
			before := runs.Load()
			if _, _, err := e.Embed(context.Background(), texts, engine.Call{OutputLimit: want}); err != nil {
				t.Errorf("at the limit: %v", err)
			}
			if runs.Load() == before {
				t.Error("no session ran at the limit")
			}
			before = runs.Load()
			_, _, err = e.Embed(context.Background(), texts, engine.Call{OutputLimit: want - 1})
			if !errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) {
				t.Errorf("a byte over the limit: %v, want result_too_large", err)
			}
			if runs.Load() != before {
				t.Errorf("%d session runs for a refused call", runs.Load()-before)
			}
			// A caller that runs each distinct text once counts its copies:
			// the first text twice is over the limit of the texts once.
			copies := make([]int, len(texts))
			copies[0] = 2
			before = runs.Load()
			_, _, err = e.Embed(context.Background(), texts, engine.Call{OutputLimit: want, Copies: copies})
			if !errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) || runs.Load() != before {
				t.Errorf("the first text twice: %v after %d runs, want result_too_large and none", err, runs.Load()-before)
			}
		})
	}
}

// TestHold: a call with no texts and Hold tokens is admitted by the same
// budget as any call and runs nothing: it holds its tokens until released,
// a second one waits for room in the queue, and a call with texts waits
// behind it like behind any other; releasing lets them in.
func TestHold(t *testing.T) {
	initORT(t)
	m := openModel(t, "tiny-hidden")
	var runs atomic.Int64
	e, err := engine.New(context.Background(), engine.Config{MaxTokens: 64, AdmissionTokens: 100, InteractiveTokens: 64}, wordTok, m, func(int) (engine.Runner, error) {
		r, err := ort.Open(m, ort.Provider{IntraOpThreads: 1})
		return &fakes.Runner{Runner: r, Runs: &runs}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base := runs.Load() // New's own runs (the cost model's probe)
	var release func()
	embs, rep, err := e.Embed(context.Background(), nil, engine.Call{Hold: 60, Admitted: func(r func()) { release = r }})
	if err != nil || embs != nil || rep.Tokens != 0 || release == nil {
		t.Fatalf("hold: %v, %d embeddings, %d tokens, admitted %v", err, len(embs), rep.Tokens, release != nil)
	}
	if n := e.Stats().AdmittedTokens; n != 60 {
		t.Fatalf("%d tokens admitted while the hold is kept, want 60", n)
	}
	second := make(chan func(), 1)
	go e.Embed(context.Background(), nil, engine.Call{Hold: 60, Admitted: func(r func()) { second <- r }})
	waiting := func(want int) {
		testkit.CheckFor(t, 60*time.Second, time.Millisecond, func() error {
			if n := e.Stats().Waiting; n != want {
				return fmt.Errorf("%d calls waiting, want %d", n, want)
			}
			return nil
		})
	}
	waiting(1)
	texts := make(chan error, 1)
	go func() {
		_, _, err := e.Embed(context.Background(), []engine.Text{{Text: sentence(10, 1)}}, engine.Call{})
		texts <- err
	}()
	waiting(2) // the call with texts (12 tokens) waits behind the hold, though it would fit
	if n := runs.Load() - base; n != 0 {
		t.Fatalf("%d session runs with the budget held", n)
	}
	release()
	r2 := <-second
	r2()
	if err := <-texts; err != nil {
		t.Fatal(err)
	}
	if runs.Load() == base {
		t.Error("the call with texts never ran")
	}
	if n := e.Stats().AdmittedTokens; n != 0 {
		t.Errorf("%d tokens admitted after every release, want 0", n)
	}
	// Without Admitted a hold is released at once.
	if _, _, err := e.Embed(context.Background(), nil, engine.Call{Hold: 60}); err != nil || e.Stats().AdmittedTokens != 0 {
		t.Errorf("a hold without Admitted: %v, %d tokens kept", err, e.Stats().AdmittedTokens)
	}
}
