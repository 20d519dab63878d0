package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestFile names the manifest inside a model directory.
const ManifestFile = "manifest.json"

// Manifest is manifest.json: the model's name, its layout, the graph it
// was written for and the sha256 of every file of the directory jetembed
// reads (paths relative to it, slash-separated: "onnx/model.onnx").
type Manifest struct {
	Format int    `json:"format"`
	Name   string `json:"name"`
	Layout string `json:"layout"`
	// ONNX is the graph to load when no other is asked for (optional).
	ONNX  string            `json:"onnx,omitempty"`
	Files map[string]string `json:"files"`
}

// manifestFormat is the only manifest format this version reads.
const manifestFormat = 1

func readManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("%w: %s: format %d, want %d", ErrInvalid, path, m.Format, manifestFormat)
	}
	if m.Layout != "" {
		if _, ok := parseLayout(m.Layout); !ok {
			return nil, fmt.Errorf("%w: %s: layout %q is neither hidden nor heads", ErrInvalid, path, m.Layout)
		}
	}
	for name := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, "\\") {
			return nil, fmt.Errorf("%w: %s: file %q is outside the model directory", ErrInvalid, path, name)
		}
	}
	if m.ONNX != "" && !filepath.IsLocal(filepath.FromSlash(m.ONNX)) {
		return nil, fmt.Errorf("%w: %s: onnx %q is outside the model directory", ErrInvalid, path, m.ONNX)
	}
	return &m, nil
}

// check compares every file the manifest lists with its sha256; the files
// jetembed reads were hashed already (files), the others are hashed here.
func (m *Manifest) check(dir string, files []File) error {
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		path := filepath.Join(dir, filepath.FromSlash(n))
		sum := ""
		for _, f := range files {
			if f.Path == n {
				sum = f.SHA256
			}
		}
		if sum == "" {
			var err error
			sum, err = fileSHA256(path)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: %s (listed in %s)", ErrMissingFile, path, ManifestFile)
			}
			if err != nil {
				return err
			}
		}
		if !strings.EqualFold(sum, m.Files[n]) {
			return fmt.Errorf("%w: %s: sha256 %s, %s says %s", ErrChecksum, path, sum, ManifestFile, m.Files[n])
		}
	}
	return nil
}

// digest hashes files (relative to dir), setting their SHA256 and Size,
// and returns the sha256 of the first graphFiles of them one after the
// other: the model's digest. Each byte is read once.
func digest(dir string, files []File, graphFiles int) (string, error) {
	all := sha256.New()
	for i := range files {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(files[i].Path)))
		if err != nil {
			return "", err
		}
		h := sha256.New()
		var w io.Writer = h
		if i < graphFiles {
			w = io.MultiWriter(h, all)
		}
		n, err := io.Copy(w, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", files[i].Path, err)
		}
		files[i].SHA256, files[i].Size = hex.EncodeToString(h.Sum(nil)), n
	}
	if graphFiles == 1 {
		return files[0].SHA256, nil
	}
	return hex.EncodeToString(all.Sum(nil)), nil
}

// fileSHA256 returns the lowercase hex sha256 of a file's content.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
