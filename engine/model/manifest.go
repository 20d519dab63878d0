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

// Manifest is manifest.json: the model's name, its layout and the sha256 of
// every file of the directory.
type Manifest struct {
	Format int               `json:"format"`
	Name   string            `json:"name"`
	Layout string            `json:"layout"`
	Files  map[string]string `json:"files"`
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
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("%w: %s: file %q is outside the model directory", ErrInvalid, path, name)
		}
	}
	return &m, nil
}

// verify checks every file the manifest lists against its sha256 and
// returns the hashes it computed, so model.onnx is not hashed twice.
func (m *Manifest) verify(dir string) (map[string]string, error) {
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	sums := make(map[string]string, len(names))
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (listed in %s)", ErrMissingFile, filepath.Join(dir, n), ManifestFile)
		}
		if err != nil {
			return nil, err
		}
		if !strings.EqualFold(sum, m.Files[n]) {
			return nil, fmt.Errorf("%w: %s: sha256 %s, %s says %s", ErrChecksum, filepath.Join(dir, n), sum, ManifestFile, m.Files[n])
		}
		sums[n] = sum
	}
	return sums, nil
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
