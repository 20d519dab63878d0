package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

func init() {
	register(command{
		name:    "model",
		summary: "inspect DIR|ID: what --model would load (files, layout, inputs, dims, heads, digests); lock DIR|ID: write its manifest.json",
		args:    "inspect|lock [flags] DIR|ID",
		run:     runModel,
	})
}

const modelUsage = `Usage: jetembed model inspect [--model-file F] [--json] DIR|ID
       jetembed model lock [--model-file F] [--name N] DIR|ID

DIR is a model directory or a Hugging Face snapshot; ID a repo id
(org/name[@revision]) in the local Hugging Face cache, as for --model.
inspect prints what would be loaded; lock writes manifest.json (the sha256
of every file jetembed reads, the layout and the graph) into the model's
directory, which --verify then requires.

`

func runModel(ctx context.Context, args []string, io stdio) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("model", io)
	fs.Usage = func() {
		fmt.Fprint(io.err, modelUsage)
		fs.PrintDefaults()
	}
	file := fs.String("model-file", "", modelFileUsage)
	asJSON := fs.Bool("json", false, "inspect: print one JSON object instead of text")
	name := fs.String("name", "", "lock: the model's name in results (default: the repo's or the directory's name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sub != "inspect" && sub != "lock" {
		return fmt.Errorf("%w: want `jetembed model inspect DIR|ID` or `jetembed model lock DIR|ID`", errUsage)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: model %s takes one DIR or repo ID, got %q", errUsage, sub, fs.Args())
	}
	ref := fs.Arg(0)
	if sub == "lock" {
		// The files as they are now: an old manifest is what is replaced.
		m, err := model.Open(ref, model.Options{File: *file})
		if err != nil {
			return err
		}
		path, err := model.Lock(m, *name)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "wrote %s: %d files, %s layout, graph %s; model id %s\n",
			path, len(m.Files), m.Layout, m.LockManifest(*name).ONNX, cmpOr(*name, m.Name)+"@"+m.SHA256[:12])
		return nil
	}
	opts := model.DefaultOptions()
	opts.File = *file
	m, err := model.Open(ref, opts)
	if err != nil {
		return err
	}
	rep, err := inspectModel(m)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(io.out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.write(io.out)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// modelFileUsage is --model-file's usage, the same for every command.
const modelFileUsage = "the ONNX graph inside the model, e.g. model_fp16.onnx or onnx/model_quantized.onnx (default: the manifest's, else model.onnx, else onnx/model.onnx)"

// modelReport is what `jetembed model inspect` prints.
type modelReport struct {
	ID       string            `json:"id"`
	Dir      string            `json:"dir"`
	Source   *model.Source     `json:"source,omitempty"`
	Layout   string            `json:"layout"`
	Inputs   map[string]string `json:"inputs"`
	Order    []string          `json:"input_order"`
	Outputs  map[string]string `json:"outputs"`
	Hidden   int               `json:"hidden_size"`
	Dense    int               `json:"dense_dim"`
	ColBERT  int               `json:"colbert_dim"`
	Max      int               `json:"max_tokens"`
	Config   model.Config      `json:"config"`
	Heads    string            `json:"heads"`
	Vocab    int               `json:"tokenizer_vocab"`
	Manifest string            `json:"manifest"`
	Digest   string            `json:"sha256"`
	Files    []model.File      `json:"files"`
	Others   []string          `json:"other_graphs,omitempty"`
}

func inspectModel(m *model.Model) (*modelReport, error) {
	tok, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		return nil, err
	}
	r := &modelReport{ID: m.ID, Dir: m.Dir, Layout: m.Layout.String(), Inputs: map[string]string{}, Outputs: map[string]string{},
		Hidden: m.Config.HiddenSize, Dense: m.Config.HiddenSize, Max: m.Config.MaxTokens, Config: m.Config,
		Vocab: tok.VocabSize(), Manifest: string(m.Manifest), Digest: m.SHA256, Files: m.Files, Order: m.Graph.Inputs}
	if m.Source.RepoID != "" {
		r.Source = &m.Source
	}
	typ := func(name, def string) string {
		if t, ok := m.Graph.Types[name]; ok {
			return t.String()
		}
		return def + " (not declared)"
	}
	for _, in := range m.Graph.Inputs {
		r.Inputs[in] = typ(in, "int64")
	}
	for _, out := range m.Graph.RunOutputs(m.Layout) {
		r.Outputs[out] = typ(out, "float32")
	}
	switch m.Layout {
	case model.LayoutHidden:
		r.ColBERT = m.ColBERT.Dim
		sp, cb := "", ""
		for _, f := range m.Files {
			switch f.Role {
			case model.RoleSparse:
				sp = f.Path
			case model.RoleColBERT:
				cb = f.Path
			}
		}
		r.Heads = fmt.Sprintf("in Go: sparse Linear(%d, 1) from %s, colbert Linear(%d, %d) from %s", m.Config.HiddenSize, sp, m.Config.HiddenSize, m.ColBERT.Dim, cb)
	case model.LayoutHeads:
		r.ColBERT = m.Config.HiddenSize
		r.Heads = "in the graph (dense_vecs, sparse_vecs, colbert_vecs)"
	}
	graph := m.Files[0].Path
	for _, d := range []string{".", model.ONNXDir} {
		ents, _ := os.ReadDir(filepath.Join(m.Dir, d))
		for _, e := range ents {
			p := filepath.ToSlash(filepath.Join(d, e.Name()))
			if strings.HasSuffix(p, ".onnx") && p != graph {
				r.Others = append(r.Others, p)
			}
		}
	}
	return r, nil
}

func (r *modelReport) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("model", "%s", r.ID)
	row("dir", "%s", r.Dir)
	if r.Source != nil {
		row("source", "%s@%s (snapshot %s) in the Hugging Face cache", r.Source.RepoID, cmpOr(r.Source.Revision, "-"), cmpOr(r.Source.Commit, "-"))
	}
	row("layout", "%s", r.Layout)
	var ins, outs []string
	for _, in := range r.Order {
		ins = append(ins, in+" "+r.Inputs[in])
	}
	for _, o := range []string{model.OutputHidden, model.OutputTokenEmbeddings, model.OutputDense, model.OutputSparse, model.OutputColBERT} {
		if t, ok := r.Outputs[o]; ok {
			outs = append(outs, o+" "+t)
		}
	}
	row("inputs", "%s", strings.Join(ins, ", "))
	row("outputs", "%s", strings.Join(outs, ", "))
	row("dims", "hidden %d, dense %d, colbert %d", r.Hidden, r.Dense, r.ColBERT)
	row("max tokens", "%d", r.Max)
	row("config", "%s, %d layers, %d heads, intermediate %d, vocab %d (tokenizer %d), pad %d",
		cmpOr(r.Config.ModelType, "?"), r.Config.Layers, r.Config.Heads, r.Config.Intermediate, r.Config.VocabSize, r.Vocab, r.Config.PadID)
	row("heads", "%s", r.Heads)
	row("manifest", "%s", r.Manifest)
	row("sha256", "%s (the model's digest: its graph file, then its external data)", r.Digest)
	for _, f := range r.Files {
		row("  "+f.Role, "%s  %s  %d bytes", f.Path, f.SHA256, f.Size)
	}
	if len(r.Others) > 0 {
		row("other graphs", "%s (choose with --model-file)", strings.Join(r.Others, ", "))
	}
	return tw.Flush()
}
