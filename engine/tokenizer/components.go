package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The pipeline of a HuggingFace tokenizer.json, one interface a stage. Each
// component type registers a constructor under its tokenizer.json "type" name
// from an init function in its own file; the loader looks them up, so a file
// that names a component nobody registered fails to load with that name.
//
// Offsets are not tracked: jetembed needs ids and counts only.

// normalizer rewrites a piece of text (HF: normalizers.*).
type normalizer interface {
	normalize(s string) string
}

// preTokenizer splits text into words (HF: pre_tokenizers.*). It appends the
// words of s to dst and returns dst.
type preTokenizer interface {
	preTokenize(dst []string, s string) []string
}

// startAwarePreTokenizer is a preTokenizer that behaves differently on the
// piece that starts the text (HF: offsets_original().0 == 0), such as
// Metaspace with prepend_scheme "first". Pieces after an added token are not
// at the start.
type startAwarePreTokenizer interface {
	preTokenizeAt(dst []string, s string, atStart bool) []string
}

// model turns one pre-tokenized word into token ids (HF: models.*). It appends
// to dst and returns dst.
type model interface {
	tokenize(dst []int32, word string) []int32
	// tokenToID and idToToken cover the model's own vocabulary.
	tokenToID(tok string) (int32, bool)
	idToToken(id int32) (string, bool)
	vocabSize() int
}

// postProcessor adds the special tokens around one sequence
// (HF: processors.*).
type postProcessor interface {
	// addedTokens is how many tokens process adds to a single sequence.
	addedTokens() int
	// process appends the special tokens and ids to dst and returns dst.
	process(dst []int32, ids []int32) []int32
	// specialIDs are the ids process may add.
	specialIDs() []int32
}

type (
	normalizerFactory    func(raw json.RawMessage) (normalizer, error)
	preTokenizerFactory  func(raw json.RawMessage) (preTokenizer, error)
	modelFactory         func(raw json.RawMessage) (model, error)
	postProcessorFactory func(raw json.RawMessage, vocab func(string) (int32, bool)) (postProcessor, error)
)

var (
	normalizers    = map[string]normalizerFactory{}
	preTokenizers  = map[string]preTokenizerFactory{}
	models         = map[string]modelFactory{}
	postProcessors = map[string]postProcessorFactory{}
)

func registerNormalizer(name string, f normalizerFactory)       { normalizers[name] = f }
func registerPreTokenizer(name string, f preTokenizerFactory)   { preTokenizers[name] = f }
func registerModel(name string, f modelFactory)                 { models[name] = f }
func registerPostProcessor(name string, f postProcessorFactory) { postProcessors[name] = f }

// componentType reads the "type" field of a component object.
func componentType(raw json.RawMessage) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", err
	}
	return head.Type, nil
}

// ErrUnsupported is wrapped by load errors for components jetembed does not
// implement; the message names the component.
var ErrUnsupported = fmt.Errorf("unsupported tokenizer component")

func unsupported(kind, name string, known map[string]bool) error {
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("%w: %s %q (supported: %s)", ErrUnsupported, kind, name, strings.Join(names, ", "))
}
