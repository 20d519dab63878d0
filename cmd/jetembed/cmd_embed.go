package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/mallocenv"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "embed",
		summary: "embed JSONL texts from a file or stdin locally, without NATS (one JSONL result per line)",
		args:    "[flags] [FILE|-]",
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
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: unexpected arguments %q (one input file, or texts on stdin)", errUsage, fs.Args())
	}
	if *batch < 1 {
		return fmt.Errorf("%w: --batch must be positive", errUsage)
	}
	want, err := parseOutputs(*outputs)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	total := -1
	if path != "" && path != "-" {
		if total, err = countLines(path); err != nil {
			return err
		}
	}
	in, closeIn, err := openInput(cmp.Or(path, "-"), io.in)
	if err != nil {
		return err
	}
	defer closeIn()
	ec, err := ef.config()
	if err != nil {
		return err
	}
	o, err := ec.open(ctx, io.err)
	if err != nil {
		return err
	}
	defer o.engine.Close()
	fmt.Fprintf(io.err, "jetembed: memory budget %s; attention %s; precision %s; malloc %s\n", ec.BudgetNote, o.attention, o.precision, mallocenv.Mode())
	return embedStream(ctx, o.engine, in, *batch, want, !*noTruncate, total, io)
}

// embedStream embeds the lines of in, batch lines at a time, and writes
// one result line per input line, in order; total (-1: unknown) sizes the
// progress line.
func embedStream(ctx context.Context, e *engine.Engine, in io.Reader, batch int, want engine.Output, truncate bool, total int, io stdio) error {
	p := newProgress(io.err, "embedded", total)
	defer p.end()
	out := bufio.NewWriter(io.out)
	defer out.Flush()
	// Embed calls wait for admission (engine.Call's default): back-pressure
	// instead of overloaded errors, this command being the only caller.
	ectx := ctx
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Batches embed concurrently (while one's last chunk runs, the other
	// sessions take the next batch) and are written in input order. The
	// channel bounds the batches in memory.
	pending := make(chan *embedBatch, 2)
	var readErr error
	go func() {
		defer close(pending)
		readErr = readBatches(in, batch, func(lines []lineText) bool {
			b := &embedBatch{lines: lines, done: make(chan struct{})}
			go b.run(ectx, e, want, truncate)
			select {
			case pending <- b:
				return true
			case <-rctx.Done():
				return false
			}
		})
	}()
	lines, failed := 0, 0
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
		lines += len(b.lines)
		failed += b.failed
		p.add(len(b.lines))
	}
	if readErr != nil {
		return fmt.Errorf("read input: %w", readErr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return linesFailed(failed, lines)
}

// countLines counts the lines of a file, for the progress total.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, last := 0, byte('\n')
	buf := make([]byte, 64<<10)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if k > 0 {
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// readBatches calls batch with every size lines of r (and the rest at the
// end) until it returns false.
func readBatches(r io.Reader, size int, batch func([]lineText) bool) error {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 0, 64<<10), maxLine)
	lines := make([]lineText, 0, size)
	n := 0
	for in.Scan() {
		n++
		lines = append(lines, parseLine(in.Bytes(), n))
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
	lines  []lineText
	buf    bytes.Buffer
	failed int // lines answered with an error
	err    error
	done   chan struct{}
}

func (b *embedBatch) run(ctx context.Context, e *engine.Engine, want engine.Output, truncate bool) {
	defer close(b.done)
	b.failed, b.err = embedLines(ctx, e, b.lines, want, truncate, json.NewEncoder(&b.buf))
}

// lineText is one input line: its id (given, else its line number) and its
// text, or why it has none.
type lineText struct {
	id   string
	text string
	err  *schema.Error
}

func parseLine(b []byte, n int) lineText {
	var v struct {
		ID   any     `json:"id"`
		Text *string `json:"text"`
	}
	l := lineText{id: strconv.Itoa(n)}
	err := json.Unmarshal(b, &v)
	if err == nil && v.ID != nil {
		l.id = fmt.Sprint(v.ID)
	}
	switch {
	case err != nil:
		l.err = schema.Errorf(schema.CodeBadPayload, "line %d is not a JSON object: %v", n, err)
	case v.Text == nil:
		l.err = schema.Errorf(schema.CodeBadPayload, `line %d has no "text" string`, n)
	default:
		l.text = *v.Text
	}
	return l
}

func parseOutputs(s string) (engine.Output, error) {
	outs, err := schema.ParseOutputs(s)
	if err != nil {
		return 0, fmt.Errorf("%w: --outputs: %w", errUsage, err)
	}
	return engine.OutputsOf(outs), nil
}

// embedLines embeds one batch of lines and writes one result per line, in
// order, returning how many lines failed. Only a refusal of the whole call
// is an error of the command.
func embedLines(ctx context.Context, e *engine.Engine, lines []lineText, want engine.Output, truncate bool, enc *json.Encoder) (int, error) {
	texts := make([]engine.Text, 0, len(lines))
	for _, l := range lines {
		if l.err == nil {
			texts = append(texts, engine.Text{Text: l.text, Outputs: want, Truncate: truncate})
		}
	}
	embs, _, err := e.Embed(ctx, texts, engine.Call{})
	if err != nil {
		return 0, err
	}
	next, failed := 0, 0
	for _, l := range lines {
		it := schema.Item{Error: l.err}
		if l.err == nil {
			it = embs[next].Item(want)
			next++
		}
		if it.Error != nil {
			failed++
		}
		if err := enc.Encode(newOutputLine(l.id, e.ModelID(), it)); err != nil {
			return 0, fmt.Errorf("write result: %w", err)
		}
	}
	return failed, nil
}
