package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetembed/jetembed/engine/tokenizer"
)

func init() {
	register(command{
		name:    "tokenize",
		summary: "tokenize JSONL {\"text\"} from stdin into JSONL {\"ids\"} (HF tokenizer.json)",
		run:     runTokenize,
	})
}

// tokenizeBatch is how many lines are read and encoded together.
const tokenizeBatch = 512

// tokenizeOut is one output line. Count appears only for a cut text; Error
// only for an input line that is not a JSON object with a string "text",
// so output line n always answers input line n.
type tokenizeOut struct {
	IDs   []int32 `json:"ids"`
	Count int     `json:"count,omitempty"`
	Error string  `json:"error,omitempty"`
}

func runTokenize(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("tokenize", io)
	path := fs.String("tokenizer", "", "tokenizer.json file (required)")
	noSpecial := fs.Bool("no-special", false, "do not add the special tokens of the post-processor")
	maxTokens := fs.Int("max-tokens", 0, "cut every text to this many tokens, specials included (0: the file's truncation; negative: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: need --tokenizer FILE and no arguments (texts come on stdin)", errUsage)
	}
	tok, err := tokenizer.Load(*path)
	if err != nil {
		return err
	}
	opt := tokenizer.Options{AddSpecialTokens: !*noSpecial, MaxTokens: *maxTokens}

	in := bufio.NewScanner(io.in)
	in.Buffer(make([]byte, 0, 64<<10), maxLine)
	out := bufio.NewWriter(io.out)
	defer out.Flush()
	enc := json.NewEncoder(out)

	var (
		texts  []string
		bad    = map[int]string{} // index in the batch -> error
		lineNo int
		nBad   int
	)
	flush := func() error {
		for i, e := range tok.EncodeBatch(texts, opt) {
			o := tokenizeOut{IDs: e.IDs}
			if msg, ok := bad[i]; ok {
				o = tokenizeOut{IDs: []int32{}, Error: msg}
			} else if e.Count > len(e.IDs) {
				o.Count = e.Count
			}
			if err := enc.Encode(o); err != nil {
				return err
			}
		}
		texts = texts[:0]
		clear(bad)
		return ctx.Err()
	}
	for in.Scan() {
		lineNo++
		var line struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(in.Bytes(), &line); err != nil || line.Text == nil {
			msg := "want a JSON object with a string \"text\""
			if err != nil {
				msg = err.Error()
			}
			fmt.Fprintf(io.err, "jetembed tokenize: line %d: %s\n", lineNo, msg)
			nBad++
			bad[len(texts)] = msg
			texts = append(texts, "")
		} else {
			texts = append(texts, *line.Text)
		}
		if len(texts) == tokenizeBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("line %d: %w", lineNo+1, err)
	}
	if err := flush(); err != nil {
		return err
	}
	return linesFailed(nBad, lineNo)
}
