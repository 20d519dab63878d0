package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jetembed/jetembed/engine/model"
)

// fakeTok is a whitespace tokenizer: bos, one id per word (10 + the
// word's length x 10 + its first byte % 10), eos. Truncation keeps eos.
type fakeTok struct{}

func (fakeTok) Encode(text string, maxTokens int) ([]int32, int) {
	words := strings.Fields(text)
	ids := []int32{0}
	for _, w := range words {
		ids = append(ids, int32(10+len(w)*10+int(w[0])%10))
	}
	ids = append(ids, 2)
	count := len(ids)
	if len(ids) > maxTokens {
		ids = append(ids[:maxTokens-1], 2)
	}
	return ids, count
}

func fakeModel(maxTokens int) *model.Model {
	return &model.Model{
		ID:     "fake@000000000000",
		Layout: model.LayoutHeads,
		Config: model.Config{HiddenSize: 2, MaxTokens: maxTokens, VocabSize: 1000, PadID: 1, BOSID: 0, EOSID: 2},
	}
}

// fakeRunner computes three-head outputs from its input alone, so a
// result tells which row it came from: dense = (sum of real ids, real
// tokens), sparse = id/1000 on real positions and 99 on padding (a test
// sees it if padding leaks), colbert rows = (id, 1) after CLS, masked to 0.
type fakeRunner struct {
	fail   func() error // nil: never fails
	block  chan struct{}
	closed *atomic.Int32
	inRun  chan<- RunInput
}

func (f *fakeRunner) Run(ctx context.Context, in RunInput) (RunOutput, error) {
	if f.inRun != nil {
		f.inRun <- in
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return RunOutput{}, ctx.Err()
		}
	}
	if f.fail != nil {
		if err := f.fail(); err != nil {
			return RunOutput{}, err
		}
	}
	o := RunOutput{Dim: 2, ColBERTLen: in.Seq - 1, ColBERTDim: 2}
	o.Dense = make([]float32, in.Batch*2)
	o.Sparse = make([]float32, in.Batch*in.Seq)
	o.ColBERT = make([]float32, in.Batch*(in.Seq-1)*2)
	for r := 0; r < in.Batch; r++ {
		for j := 0; j < in.Seq; j++ {
			p := r*in.Seq + j
			if in.Mask[p] == 0 {
				o.Sparse[p] = 99
				continue
			}
			o.Dense[r*2] += float32(in.IDs[p])
			o.Dense[r*2+1]++
			o.Sparse[p] = float32(in.IDs[p]) / 1000
			if j > 0 {
				c := (r*(in.Seq-1) + j - 1) * 2
				o.ColBERT[c], o.ColBERT[c+1] = float32(in.IDs[p]), 1
			}
		}
	}
	return o, nil
}

func (f *fakeRunner) Close() error {
	if f.closed != nil {
		f.closed.Add(1)
	}
	return nil
}

// factory counts loads and builds runners with mk (nil error unless
// loadErr says so for this load number).
type factory struct {
	mu      sync.Mutex
	loads   int
	loadErr func(load int) error
	mk      func(session int) *fakeRunner
}

func (f *factory) new(session int) (Runner, error) {
	f.mu.Lock()
	f.loads++
	n := f.loads
	f.mu.Unlock()
	if f.loadErr != nil {
		if err := f.loadErr(n); err != nil {
			return nil, err
		}
	}
	if f.mk == nil {
		return &fakeRunner{}, nil
	}
	return f.mk(session), nil
}

func (f *factory) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads
}

var errBoom = errors.New("boom")
