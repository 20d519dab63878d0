package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Files every model directory holds.
const (
	ONNXFile      = "model.onnx"
	TokenizerFile = "tokenizer.json"
	ConfigFile    = "config.json"
)

// idHexLen is how many hex chars of the model's digest go into [Model.ID].
const idHexLen = 12

// Options are the checks [Open] makes beyond the directory's own
// consistency, and the graph it picks.
type Options struct {
	// SHA256 optionally pins the model: its digest ([Model.SHA256]) must
	// start with this hex string (a prefix such as the 12 chars of a model
	// id is enough).
	SHA256 string
	// VerifyManifest requires manifest.json, and that it lists every file
	// jetembed reads with its sha256.
	VerifyManifest bool
	// CheckManifest checks the files manifest.json lists when the model has
	// one. It is on in [DefaultOptions]; the zero Options skip the manifest.
	CheckManifest bool
	// File is the ONNX graph to load (model_fp16.onnx, say), relative to
	// the model directory or to its onnx/ folder. Empty: the manifest's,
	// else model.onnx, else onnx/model.onnx.
	File string
}

// DefaultOptions returns the options jetembed starts with: the manifest
// checked when there is one, no pin.
func DefaultOptions() Options { return Options{CheckManifest: true} }

// Model is an opened, checked model directory.
type Model struct {
	// Dir is the model's root directory (for a repo id, the snapshot in
	// the Hugging Face cache); Source says how it was found.
	Dir    string
	Source Source
	Name   string
	// ID is "<name>@<first 12 hex chars of SHA256>"; results and fleet
	// keys carry it.
	ID string
	// SHA256 is the model's digest, lowercase hex: the sha256 of the graph
	// file followed by its external data files in the order the graph
	// names them (for a graph without external data, of model.onnx alone).
	SHA256 string
	Layout Layout
	Graph  Graph
	Config Config
	// Sparse and ColBERT are the head weights of the hidden-state layout;
	// zero for the heads layout, whose graph applies them.
	Sparse  SparseLinear
	ColBERT ColBERTLinear

	TokenizerPath string
	ONNXPath      string
	// Files are the files jetembed reads, with their digests.
	Files []File
	// Manifest says what was checked against manifest.json.
	Manifest ManifestUse
}

// File is one file of a model.
type File struct {
	Path   string // relative to [Model.Dir], slash-separated
	Role   string // graph, external data, tokenizer, config, sparse head, colbert head
	Size   int64
	SHA256 string
}

// ManifestUse says how [Open] used manifest.json.
type ManifestUse string

// The ways a manifest is used.
const (
	ManifestVerified ManifestUse = "verified" // required, lists every file read, all match
	ManifestChecked  ManifestUse = "checked"  // present; the files it lists match
	ManifestAbsent   ManifestUse = "absent"   // none; the digests are only reported
	ManifestSkipped  ManifestUse = "skipped"  // not read (Options without a check)
)

// Open resolves ref (a model directory, a Hugging Face snapshot, or a repo
// id in the local Hugging Face cache, see [Resolve]), checks it and loads
// what the engine needs from it. Errors name the missing or mismatched
// file and wrap [ErrMissingFile], [ErrNotDownloaded], [ErrChecksum],
// [ErrLayout] or [ErrInvalid].
func Open(ref string, opts Options) (*Model, error) {
	src, err := Resolve(ref)
	if err != nil {
		return nil, err
	}
	dir := src.Dir
	m := &Model{Dir: dir, Source: src, Manifest: ManifestSkipped}

	var man *Manifest
	if opts.VerifyManifest || opts.CheckManifest {
		if man, err = openManifest(dir, opts.VerifyManifest); err != nil {
			return nil, err
		}
		m.Manifest = ManifestAbsent
	}
	graphRel, err := findGraph(dir, opts.File, man)
	if err != nil {
		return nil, err
	}
	m.ONNXPath = filepath.Join(dir, graphRel)
	graphDir := filepath.Dir(graphRel)
	if m.Graph, err = ReadGraph(m.ONNXPath); err != nil {
		return nil, err
	}
	if m.Layout, err = m.Graph.Layout(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.ONNXPath, err)
	}
	if man != nil && man.Layout != "" && man.Layout != m.Layout.String() {
		return nil, fmt.Errorf("%w: %s says layout %q, %s has %s outputs %v",
			ErrLayout, filepath.Join(dir, ManifestFile), man.Layout, graphRel, m.Layout, m.Graph.Outputs)
	}

	files := []File{{Path: filepath.ToSlash(graphRel), Role: RoleGraph}}
	for _, loc := range m.Graph.External {
		rel := filepath.Join(graphDir, filepath.FromSlash(loc))
		if !filepath.IsLocal(filepath.FromSlash(loc)) || !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("%w: %s: external data %q is outside the model directory", ErrInvalid, m.ONNXPath, loc)
		}
		if err := requireFiles(dir, rel); err != nil {
			return nil, fmt.Errorf("%w (external data of %s)", err, graphRel)
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Role: RoleExternal})
	}
	tokRel, err := findBeside(dir, graphDir, TokenizerFile)
	if err != nil {
		return nil, err
	}
	cfgRel, err := findBeside(dir, graphDir, ConfigFile)
	if err != nil {
		return nil, err
	}
	m.TokenizerPath = filepath.Join(dir, tokRel)
	files = append(files, File{Path: filepath.ToSlash(tokRel), Role: RoleTokenizer}, File{Path: filepath.ToSlash(cfgRel), Role: RoleConfig})
	if m.Config, err = readConfig(filepath.Join(dir, cfgRel)); err != nil {
		return nil, err
	}

	if m.Layout == LayoutHidden {
		headsErr := func(err error) error {
			err = fmt.Errorf("%w (the hidden-state layout needs both head files)", err)
			if filepath.Base(filepath.Clean(dir)) == ONNXDir {
				err = fmt.Errorf("%w; in a Hugging Face snapshot they are at its root: point --model at %s", err, filepath.Dir(filepath.Clean(dir)))
			}
			return err
		}
		sp, err := findBeside(dir, graphDir, SparseFile, SparseTorch)
		if err != nil {
			return nil, headsErr(err)
		}
		cb, err := findBeside(dir, graphDir, ColBERTFile, ColBERTTorch)
		if err != nil {
			return nil, headsErr(err)
		}
		if m.Sparse, err = readSparse(filepath.Join(dir, sp), m.Config.HiddenSize); err != nil {
			return nil, err
		}
		if m.ColBERT, err = readColBERT(filepath.Join(dir, cb), m.Config.HiddenSize); err != nil {
			return nil, err
		}
		files = append(files, File{Path: filepath.ToSlash(sp), Role: RoleSparse}, File{Path: filepath.ToSlash(cb), Role: RoleColBERT})
	}

	graphFiles := 1 + len(m.Graph.External)
	if m.SHA256, err = digest(dir, files, graphFiles); err != nil {
		return nil, err
	}
	m.Files = files
	if man != nil {
		if err := man.check(dir, files); err != nil {
			return nil, err
		}
		m.Manifest = ManifestChecked
		if opts.VerifyManifest {
			if err := man.requireListed(dir, files); err != nil {
				return nil, err
			}
			m.Manifest = ManifestVerified
		}
	}
	if err := checkPin(m.ONNXPath, m.SHA256, opts.SHA256); err != nil {
		return nil, err
	}

	m.Name = filepath.Base(filepath.Clean(dir))
	if _, name, ok := strings.Cut(src.RepoID, "/"); ok {
		m.Name = name
	}
	if man != nil && man.Name != "" {
		m.Name = man.Name
	}
	m.ID = m.Name + "@" + m.SHA256[:idHexLen]
	return m, nil
}

// Fingerprint is a digest of every file the model reads (graph and its
// external data, tokenizer, config, heads: their paths and digests), so
// that a model whose tokenizer or heads changed under the same graph has
// another. The result cache's keys name it; [Model.ID] names the graph.
func (m *Model) Fingerprint() string {
	files := slices.Clone(m.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%s\n", f.Path, f.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Roles of [File].
const (
	RoleGraph     = "graph"
	RoleExternal  = "external data"
	RoleTokenizer = "tokenizer"
	RoleConfig    = "config"
	RoleSparse    = "sparse head"
	RoleColBERT   = "colbert head"
)

// findGraph picks the ONNX graph of dir, relative to it.
func findGraph(dir, file string, man *Manifest) (string, error) {
	if file == "" && man != nil && man.ONNX != "" {
		file = filepath.FromSlash(man.ONNX)
	}
	if file != "" {
		if filepath.IsAbs(file) || !filepath.IsLocal(file) {
			return "", fmt.Errorf("%w: graph %q must be a path inside the model directory %s", ErrInvalid, file, dir)
		}
		cands := []string{file}
		if !strings.ContainsRune(file, filepath.Separator) {
			cands = append(cands, filepath.Join(ONNXDir, file))
		}
		return firstFile(dir, cands)
	}
	rel, err := firstFile(dir, []string{ONNXFile, filepath.Join(ONNXDir, ONNXFile)})
	if err != nil {
		if others := onnxFiles(dir); len(others) > 0 {
			return "", fmt.Errorf("%w; it has %s: choose one with --model-file", err, strings.Join(others, ", "))
		}
	}
	return rel, err
}

// ONNXDir is where a Hugging Face snapshot keeps its ONNX export.
const ONNXDir = "onnx"

// findBeside finds the first of names next to the graph (in graphDir),
// else at the root: an export's own tokenizer and config come first.
func findBeside(dir, graphDir string, names ...string) (string, error) {
	var cands []string
	for _, d := range []string{graphDir, "."} {
		for _, n := range names {
			if c := filepath.Join(d, n); !slices.Contains(cands, c) {
				cands = append(cands, c)
			}
		}
	}
	return firstFile(dir, cands)
}

// firstFile returns the first of the candidate paths (relative to dir)
// that is a file; else an error naming them all.
func firstFile(dir string, cands []string) (string, error) {
	var tried []string
	for _, c := range cands {
		err := requireFiles(dir, c)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, ErrMissingFile) {
			return "", err
		}
		tried = append(tried, filepath.Join(dir, c))
	}
	return "", fmt.Errorf("%w: %s", ErrMissingFile, strings.Join(tried, " or "))
}

// onnxFiles lists the .onnx files at dir's root and in its onnx/.
func onnxFiles(dir string) []string {
	var out []string
	for _, d := range []string{".", ONNXDir} {
		ents, _ := os.ReadDir(filepath.Join(dir, d))
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".onnx") {
				out = append(out, filepath.ToSlash(filepath.Join(d, e.Name())))
			}
		}
	}
	return out
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
func (m *Manifest) requireListed(dir string, files []File) error {
	for _, f := range files {
		if _, ok := m.Files[f.Path]; !ok {
			return fmt.Errorf("%w: %s does not list %s (the %s)", ErrInvalid, filepath.Join(dir, ManifestFile), f.Path, f.Role)
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
