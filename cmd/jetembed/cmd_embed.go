package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "embed",
		summary: "embed JSONL texts from stdin locally, without NATS (one JSONL result per line)",
		run:     runEmbed,
	})
}

// maxLine bounds one input line: the longest text BGE-M3 takes is 8192
// tokens, far below this even for the most bytes per token.
const maxLine = 16 << 20

func runEmbed(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("embed", io)
	ef := addEngineFlags(fs, false)
	outputs := fs.String("outputs", "dense", "vectors to compute: dense, sparse, colbert (comma separated)")
	noTruncate := fs.Bool("no-truncate", false, "fail texts over the model's maximum with text_too_long instead of cutting them")
	batch := fs.Int("batch", 256, "texts read and embedded together (memory stays bounded by this)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q (texts come on stdin)", errUsage, fs.Args())
	}
	if *batch < 1 {
		return fmt.Errorf("%w: --batch must be positive", errUsage)
	}
	want, err := parseOutputs(*outputs)
	if err != nil {
		return err
	}
	e, _, err := ef.open(ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(io.err, "jetembed: memory budget %s\n", ef.budgetNote)

	p := newProgress(io.err)
	out := bufio.NewWriter(io.out)
	defer out.Flush()
	// Waiting for admission gives back-pressure instead of overloaded
	// errors: this command is the only caller.
	ectx := engine.WithAdmissionWait(ctx)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Batches embed concurrently (while one's last chunk runs, the other
	// sessions take the next batch) and are written in input order. The
	// channel bounds the batches in memory.
	pending := make(chan *embedBatch, 2)
	var readErr error
	go func() {
		defer close(pending)
		readErr = readBatches(io.in, *batch, func(lines []lineText) bool {
			b := &embedBatch{lines: lines, done: make(chan struct{})}
			go b.run(ectx, e, want, !*noTruncate)
			select {
			case pending <- b:
				return true
			case <-rctx.Done():
				return false
			}
		})
	}()
	for b := range pending {
		<-b.done
		if b.err != nil {
			return b.err
		}
		if _, err := out.Write(b.buf.Bytes()); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		if err := out.Flush(); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		p.add(b.lines)
	}
	if readErr != nil {
		return fmt.Errorf("read stdin: %w", readErr)
	}
	p.done()
	return ctx.Err()
}

// readBatches calls batch with every size lines of r (and the rest at the
// end) until it returns false.
func readBatches(r io.Reader, size int, batch func([]lineText) bool) error {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 0, 64<<10), maxLine)
	lines := make([]lineText, 0, size)
	for in.Scan() {
		lines = append(lines, parseLine(in.Bytes()))
		if len(lines) == size {
			if !batch(lines) {
				return nil
			}
			lines = make([]lineText, 0, size)
		}
	}
	if len(lines) > 0 {
		batch(lines)
	}
	return in.Err()
}

// embedBatch is one batch of lines on its way through the engine; done
// closes when buf holds its JSONL results or err is set.
type embedBatch struct {
	lines []lineText
	buf   bytes.Buffer
	err   error
	done  chan struct{}
}

func (b *embedBatch) run(ctx context.Context, e *engine.Engine, want engine.Output, truncate bool) {
	defer close(b.done)
	b.err = embedLines(ctx, e, b.lines, want, truncate, json.NewEncoder(&b.buf))
}

// lineText is one input line: its text, or why it has none.
type lineText struct {
	text string
	err  *schema.Error
}

func parseLine(b []byte) lineText {
	var v struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return lineText{err: schema.Errorf(schema.CodeBadPayload, "line is not a JSON object: %v", err)}
	}
	if v.Text == nil {
		return lineText{err: schema.Errorf(schema.CodeBadPayload, `line has no "text" string`)}
	}
	return lineText{text: *v.Text}
}

func parseOutputs(s string) (engine.Output, error) {
	outs, err := schema.ParseOutputs(s)
	if err != nil {
		return 0, fmt.Errorf("%w: --outputs: %w", errUsage, err)
	}
	var o engine.Output
	for _, x := range outs {
		switch x {
		case schema.OutputDense:
			o |= engine.Dense
		case schema.OutputSparse:
			o |= engine.Sparse
		case schema.OutputColBERT:
			o |= engine.ColBERT
		}
	}
	if o == 0 {
		o = engine.Dense
	}
	return o, nil
}

// embedLines embeds one batch of lines and writes one result per line, in
// order. Only a refusal of the whole call is an error of the command.
func embedLines(ctx context.Context, e *engine.Engine, lines []lineText, want engine.Output, truncate bool, enc *json.Encoder) error {
	texts := make([]engine.Text, 0, len(lines))
	for _, l := range lines {
		if l.err == nil {
			texts = append(texts, engine.Text{Text: l.text, Outputs: want, Truncate: truncate})
		}
	}
	embs, _, err := e.Embed(ctx, texts)
	if err != nil {
		return err
	}
	next := 0
	for _, l := range lines {
		it := schema.Item{Error: l.err}
		if l.err == nil {
			it = item(embs[next], want)
			next++
		}
		if err := enc.Encode(it); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	return nil
}

// item converts an engine result to its wire form.
func item(e engine.Embedding, want engine.Output) schema.Item {
	it := schema.Item{Tokens: e.Tokens, Truncated: e.Truncated, Error: e.Err}
	if e.Err != nil {
		return it
	}
	it.Dense = e.Dense
	if want.Has(engine.Sparse) {
		// Present even when empty: every token may have been dropped.
		it.Sparse = &schema.Sparse{IDs: nonNil(e.SparseIDs), Weights: nonNil(e.SparseWeights)}
	}
	if e.ColBERTDim > 0 {
		it.ColBERT = make([]schema.Vector, 0, len(e.ColBERT)/e.ColBERTDim)
		for r := 0; r+e.ColBERTDim <= len(e.ColBERT); r += e.ColBERTDim {
			it.ColBERT = append(it.ColBERT, e.ColBERT[r:r+e.ColBERTDim])
		}
	}
	return it
}

// progress prints a one-line count on stderr when stderr is a terminal.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	texts int
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, on: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

func (p *progress) add(lines []lineText) {
	p.texts += len(lines)
	if p.on {
		rate := float64(p.texts) / time.Since(p.start).Seconds()
		fmt.Fprintf(p.w, "\rembedded %d texts (%.0f/s)", p.texts, rate)
	}
}

func (p *progress) done() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
