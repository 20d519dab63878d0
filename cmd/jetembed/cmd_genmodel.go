package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jetembed/jetembed/internal/onnxgen"
)

// defaultTokenizer is the XLM-R style tokenizer committed for tests, relative
// to the repository root.
const defaultTokenizer = "testdata/tokenizers/xlmr-unigram.json"

// findTokenizer finds the default tokenizer from any directory: under the
// working directory or one of its parents (inside a checkout), else beside
// the binary or above it (bin/jetembed of a checkout).
func findTokenizer() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, defaultTokenizer)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("%w: %s not found above the working directory or the binary; give --tokenizer", errUsage, defaultTokenizer)
}

func init() {
	register(command{
		name:    "genmodel",
		summary: "write a small BGE-M3-shaped test model directory (random weights)",
		run:     runGenmodel,
	})
}

func runGenmodel(_ context.Context, args []string, io stdio) error {
	fs := newFlagSet("genmodel", io)
	size := fs.String("size", "tiny", "model size: tiny (hidden 32, 2 layers), small (MiniLM size: hidden 384, 6 layers) or m3 (BGE-M3's: hidden 1024, 24 layers; with its 250k-token vocabulary over 2 GB, refused without --external-data or fewer --layers)")
	layers := fs.Int("layers", 0, "encoder layers, if not the size's (the layers' width stays the size's)")
	layout := fs.String("layout", "hidden", "export layout: hidden (last_hidden_state + head safetensors) or heads (dense/sparse/colbert outputs)")
	fp16 := fs.Bool("fp16", false, "store the weights as float16 (compute and outputs stay float32)")
	pattern := fs.String("attention-pattern", "generator", "how the layers write attention, for testing the attention rewrite: generator, eager (Hugging Face eager as torch.onnx.export writes it) or sdpa (torch's scaled_dot_product_attention export); same vectors")
	external := fs.Bool("external-data", false, "write the weights to model.onnx_data beside model.onnx, as exports over 2 GB are")
	seed := fs.Int("seed", 42, "seed of the random weights; same flags give byte-identical files")
	tokenizer := fs.String("tokenizer", "", "tokenizer.json to copy into the model directory; its vocabulary sets vocab_size (default: the repository's "+defaultTokenizer+", found above the working directory or the binary)")
	out := fs.String("out", "", "model directory to write (created if missing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	if *seed < 0 {
		return fmt.Errorf("%w: --seed must not be negative", errUsage)
	}
	s, err := onnxgen.SizeByName(*size)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *layers < 0 || *layers > 48 {
		return fmt.Errorf("%w: --layers %d (want 1 to 48, or 0 for the size's)", errUsage, *layers)
	}
	if *layers > 0 {
		s.Layers = *layers
	}
	l := onnxgen.Layout(*layout)
	if l != onnxgen.LayoutHidden && l != onnxgen.LayoutHeads {
		return fmt.Errorf("%w: --layout %q (want hidden or heads)", errUsage, *layout)
	}
	if *tokenizer == "" {
		if *tokenizer, err = findTokenizer(); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(*tokenizer)
	if err != nil {
		return fmt.Errorf("read tokenizer: %w", err)
	}
	a := onnxgen.Attention(*pattern)
	switch a {
	case "generator":
		a = onnxgen.AttentionGenerator
	case onnxgen.AttentionEager, onnxgen.AttentionSDPA:
	default:
		return fmt.Errorf("%w: --attention-pattern %q (want generator, eager or sdpa)", errUsage, *pattern)
	}
	c := onnxgen.Config{Size: s, Layout: l, FP16: *fp16, Seed: uint64(*seed), Attention: a, ExternalData: *external}
	if err := onnxgen.WriteDir(*out, c, tok); err != nil {
		return err
	}
	info, err := os.Stat(filepath.Join(*out, "model.onnx"))
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "wrote %s (%s, %d layers, %s layout, model.onnx %d bytes)\n", *out, *size, s.Layers, l, info.Size())
	return nil
}
