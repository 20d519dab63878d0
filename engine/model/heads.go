package model

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/jetembed/jetembed/internal/safetensors"
	"github.com/jetembed/jetembed/internal/torchpt"
)

// Head weight files of the hidden-state layout (BGE-M3's torch.nn.Linear
// heads, saved as "weight" and "bias"): safetensors, or the torch.save
// files of the BAAI/bge-m3 repository, read in Go (see internal/torchpt).
// When both are there the safetensors file is used: it holds no pickle.
const (
	SparseFile    = "sparse_linear.safetensors"
	ColBERTFile   = "colbert_linear.safetensors"
	SparseTorch   = "sparse_linear.pt"
	ColBERTTorch  = "colbert_linear.pt"
	maxHeadsBytes = 1 << 30 // a ColBERT head of 16k x 16k floats
)

// SparseLinear is BGE-M3's sparse head, Linear(H, 1): a token's weight is
// relu(W·h + B).
type SparseLinear struct {
	W []float32 // H
	B float32
}

// ColBERTLinear is BGE-M3's ColBERT head, Linear(H, C): a token's vector
// is W·h + B before per-token L2 normalization.
type ColBERTLinear struct {
	W   []float32 // Dim x H, row-major
	B   []float32 // Dim
	Dim int
}

func readSparse(path string, hidden int) (SparseLinear, error) {
	w, b, err := readLinear(path, hidden)
	if err != nil {
		return SparseLinear{}, err
	}
	if w.Shape[0] != 1 {
		return SparseLinear{}, fmt.Errorf("%w: %s: weight shape %v, want [1 %d]", ErrInvalid, path, w.Shape, hidden)
	}
	return SparseLinear{W: w.Data, B: b.Data[0]}, nil
}

func readColBERT(path string, hidden int) (ColBERTLinear, error) {
	w, b, err := readLinear(path, hidden)
	if err != nil {
		return ColBERTLinear{}, err
	}
	return ColBERTLinear{W: w.Data, B: b.Data, Dim: w.Shape[0]}, nil
}

// readLinear reads a Linear(hidden, out) layer: weight [out, hidden] and
// bias [out].
func readLinear(path string, hidden int) (w, b safetensors.Tensor, err error) {
	ts, err := readTensors(path)
	if err != nil {
		return w, b, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	w, okW := ts["weight"]
	b, okB := ts["bias"]
	if !okW || !okB {
		return w, b, fmt.Errorf("%w: %s: want tensors \"weight\" and \"bias\", have %v", ErrInvalid, path, tensorNames(ts))
	}
	if len(w.Shape) != 2 || w.Shape[1] != hidden || w.Shape[0] < 1 {
		return w, b, fmt.Errorf("%w: %s: weight shape %v does not match hidden_size %d (want [out %d])", ErrInvalid, path, w.Shape, hidden, hidden)
	}
	if len(b.Shape) != 1 || b.Shape[0] != w.Shape[0] {
		return w, b, fmt.Errorf("%w: %s: bias shape %v, want [%d]", ErrInvalid, path, b.Shape, w.Shape[0])
	}
	return w, b, nil
}

// readTensors reads a safetensors or a torch.save (.pt, .bin) file.
func readTensors(path string) (map[string]safetensors.Tensor, error) {
	if filepath.Ext(path) == ".safetensors" {
		return safetensors.ReadFile(path)
	}
	pt, err := torchpt.ReadFile(path, torchpt.Limits{MaxBytes: maxHeadsBytes})
	if err != nil {
		return nil, err
	}
	ts := make(map[string]safetensors.Tensor, len(pt))
	for n, t := range pt {
		ts[n] = safetensors.Tensor{Shape: t.Shape, Data: t.Data}
	}
	return ts, nil
}

func tensorNames(ts map[string]safetensors.Tensor) []string {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
