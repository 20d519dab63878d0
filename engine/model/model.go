package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files every model directory holds.
const (
	ONNXFile      = "model.onnx"
	TokenizerFile = "tokenizer.json"
	ConfigFile    = "config.json"
)

// idHexLen is how many hex chars of model.onnx's sha256 go into [Model.ID].
const idHexLen = 12

// Options are the checks [Open] makes beyond the directory's own
// consistency.
type Options struct {
	// SHA256 optionally pins model.onnx: its sha256 must start with this
	// hex string (a prefix such as the 12 chars of a model id is enough).
	SHA256 string
	// VerifyManifest checks every file listed in manifest.json against its
	// sha256, and requires the manifest to list the files jetembed reads.
	// It is on in [DefaultOptions]; the zero Options skip it.
	VerifyManifest bool
}

// DefaultOptions returns the options jetembed starts with: manifest checked,
// no pin.
func DefaultOptions() Options { return Options{VerifyManifest: true} }

// Model is an opened, checked model directory.
type Model struct {
	Dir  string
	Name string
	// ID is "<name>@<first 12 hex chars of model.onnx's sha256>"; results
	// and fleet keys carry it.
	ID     string
	SHA256 string // of model.onnx, lowercase hex
	Layout Layout
	Graph  Graph
	Config Config
	// Sparse and ColBERT are the head weights of the hidden-state layout;
	// zero for the heads layout, whose graph applies them.
	Sparse  SparseLinear
	ColBERT ColBERTLinear

	TokenizerPath string
	ONNXPath      string
}

// Open checks the model directory dir and loads what the engine needs
// from it. Errors name the missing or mismatched file and wrap
// [ErrMissingFile], [ErrChecksum], [ErrLayout] or [ErrInvalid].
func Open(dir string, opts Options) (*Model, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: model directory: %w", ErrMissingFile, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: model directory %s is not a directory", ErrInvalid, dir)
	}
	m := &Model{
		Dir:           dir,
		ONNXPath:      filepath.Join(dir, ONNXFile),
		TokenizerPath: filepath.Join(dir, TokenizerFile),
	}
	if err := requireFiles(dir, ONNXFile, TokenizerFile, ConfigFile); err != nil {
		return nil, err
	}

	man, err := openManifest(dir, opts.VerifyManifest)
	if err != nil {
		return nil, err
	}
	var sums map[string]string
	if opts.VerifyManifest {
		if sums, err = man.verify(dir); err != nil {
			return nil, err
		}
	}
	if m.SHA256 = sums[ONNXFile]; m.SHA256 == "" {
		if m.SHA256, err = fileSHA256(m.ONNXPath); err != nil {
			return nil, err
		}
	}
	if err := checkPin(m.ONNXPath, m.SHA256, opts.SHA256); err != nil {
		return nil, err
	}

	if m.Config, err = readConfig(filepath.Join(dir, ConfigFile)); err != nil {
		return nil, err
	}
	if m.Graph, err = ReadGraph(m.ONNXPath); err != nil {
		return nil, err
	}
	if m.Layout, err = m.Graph.Layout(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.ONNXPath, err)
	}
	if man != nil && man.Layout != "" && man.Layout != m.Layout.String() {
		return nil, fmt.Errorf("%w: %s says layout %q, %s has %s outputs %v",
			ErrLayout, filepath.Join(dir, ManifestFile), man.Layout, ONNXFile, m.Layout, m.Graph.Outputs)
	}

	if m.Layout == LayoutHidden {
		if err := requireFiles(dir, SparseFile, ColBERTFile); err != nil {
			return nil, fmt.Errorf("%w (the hidden-state layout needs both head files)", err)
		}
		if m.Sparse, err = readSparse(filepath.Join(dir, SparseFile), m.Config.HiddenSize); err != nil {
			return nil, err
		}
		if m.ColBERT, err = readColBERT(filepath.Join(dir, ColBERTFile), m.Config.HiddenSize); err != nil {
			return nil, err
		}
	}
	if opts.VerifyManifest {
		if err := man.requireListed(dir, m.Layout); err != nil {
			return nil, err
		}
	}

	m.Name = filepath.Base(filepath.Clean(dir))
	if man != nil && man.Name != "" {
		m.Name = man.Name
	}
	m.ID = m.Name + "@" + m.SHA256[:idHexLen]
	return m, nil
}

// openManifest reads manifest.json; it may be absent only when it is not
// verified.
func openManifest(dir string, required bool) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	man, err := readManifest(path)
	if errors.Is(err, fs.ErrNotExist) {
		if required {
			return nil, fmt.Errorf("%w: %s (needed to verify the model files)", ErrMissingFile, path)
		}
		return nil, nil
	}
	return man, err
}

// requireListed makes sure the manifest pins every file jetembed reads, so
// verification cannot pass by omission.
func (m *Manifest) requireListed(dir string, l Layout) error {
	need := []string{ONNXFile, TokenizerFile, ConfigFile}
	if l == LayoutHidden {
		need = append(need, SparseFile, ColBERTFile)
	}
	for _, n := range need {
		if _, ok := m.Files[n]; !ok {
			return fmt.Errorf("%w: %s does not list %s", ErrInvalid, filepath.Join(dir, ManifestFile), n)
		}
	}
	return nil
}

func requireFiles(dir string, names ...string) error {
	for _, n := range names {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrMissingFile, p)
		}
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("%w: %s is a directory", ErrInvalid, p)
		}
	}
	return nil
}

func checkPin(path, sum, pin string) error {
	if pin == "" {
		return nil
	}
	pin = strings.ToLower(pin)
	for _, c := range pin {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return fmt.Errorf("%w: sha256 pin %q is not hex", ErrInvalid, pin)
		}
	}
	if len(pin) > len(sum) || !strings.HasPrefix(sum, pin) {
		return fmt.Errorf("%w: %s: sha256 %s does not match the pin %s", ErrChecksum, path, sum, pin)
	}
	return nil
}
