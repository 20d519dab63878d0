package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jetembed/jetembed/internal/mallocenv"
)

// PeerRun is one batch size of the transformers.js peer.
type PeerRun struct {
	Batch      int     `json:"batch"`
	Seconds    float64 `json:"seconds"`
	TextsPerS  float64 `json:"texts_per_s"`
	Dimensions int     `json:"dim"`
	// Rounds are the texts/s of every round; Seconds and TextsPerS are
	// those of the best.
	Rounds []float64 `json:"rounds"`
}

// Peer is what scripts/peer/peer.js reports.
type Peer struct {
	Version string    `json:"-"`
	Threads int       `json:"threads"`
	Texts   int       `json:"texts"`
	Runs    []PeerRun `json:"runs"`
}

// Best returns the fastest batch size.
func (p Peer) Best() PeerRun {
	var best PeerRun
	for _, r := range p.Runs {
		if r.TextsPerS > best.TextsPerS {
			best = r
		}
	}
	return best
}

// hfLayout makes dir a model directory in Hugging Face layout
// (config.json, tokenizer.json, tokenizer_config.json, onnx/model.onnx) for
// transformers.js, with links to the files of m's directory: the peer runs
// the very same graph and tokenizer.
func hfLayout(dir, modelDir, onnxPath, tokenizerPath string) error {
	if err := os.MkdirAll(filepath.Join(dir, "onnx"), 0o755); err != nil {
		return err
	}
	links := map[string]string{
		filepath.Join(dir, "config.json"):        filepath.Join(modelDir, "config.json"),
		filepath.Join(dir, "tokenizer.json"):     tokenizerPath,
		filepath.Join(dir, "onnx", "model.onnx"): onnxPath,
	}
	for link, target := range links {
		abs, err := filepath.Abs(target)
		if err != nil {
			return err
		}
		_ = os.Remove(link)
		if err := os.Symlink(abs, link); err != nil {
			return err
		}
	}
	// The XLM-R special tokens, which tokenizer.json alone does not name
	// for transformers.js (it pads with pad_token).
	cfg := `{"tokenizer_class":"XLMRobertaTokenizer","model_max_length":8192,"bos_token":"<s>","eos_token":"</s>",` +
		`"cls_token":"<s>","sep_token":"</s>","pad_token":"<pad>","unk_token":"<unk>","mask_token":"<mask>"}`
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg+"\n"), 0o644)
}

// runPeer runs node peer.js from peerDir (where npm installed
// @huggingface/transformers) on texts.
func runPeer(ctx context.Context, peerDir, hfDir string, texts []string, threads int, batches []int) (Peer, error) {
	var p Peer
	peerDir, err := filepath.Abs(peerDir)
	if err != nil {
		return p, err
	}
	f, err := os.CreateTemp("", "jetembed-peer-*.jsonl")
	if err != nil {
		return p, err
	}
	defer os.Remove(f.Name())
	enc := json.NewEncoder(f)
	for _, t := range texts {
		if err := enc.Encode(t); err != nil {
			f.Close()
			return p, err
		}
	}
	if err := f.Close(); err != nil {
		return p, err
	}
	bs := make([]string, len(batches))
	for i, b := range batches {
		bs[i] = fmt.Sprint(b)
	}
	cmd := exec.CommandContext(ctx, "node", filepath.Join(peerDir, "peer.js"), hfDir, f.Name(), fmt.Sprint(threads), strings.Join(bs, ","))
	cmd.Env = mallocenv.ChildEnv() // the peer runs on its own defaults
	cmd.Dir = peerDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return p, fmt.Errorf("peer: %w: %s", err, stderr.String())
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &p); err != nil {
		return p, fmt.Errorf("peer output %q: %w", stdout.String(), err)
	}
	if data, err := os.ReadFile(filepath.Join(peerDir, "node_modules", "@huggingface", "transformers", "package.json")); err == nil {
		var v struct{ Version string }
		if json.Unmarshal(data, &v) == nil {
			p.Version = v.Version
		}
	}
	return p, nil
}
