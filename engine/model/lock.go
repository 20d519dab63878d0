package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// LockManifest returns the manifest that pins m: its name, layout, graph and
// the sha256 of every file it reads.
func (m *Model) LockManifest(name string) *Manifest {
	if name == "" {
		name = m.Name
	}
	man := &Manifest{Format: manifestFormat, Name: name, Layout: m.Layout.String(), Files: make(map[string]string, len(m.Files))}
	for _, f := range m.Files {
		man.Files[f.Path] = f.SHA256
		if f.Role == RoleGraph {
			man.ONNX = f.Path
		}
	}
	return man
}

// Lock writes m's manifest ([Model.LockManifest]) to manifest.json in
// m.Dir, replacing any there (a symlink into a Hugging Face cache's blobs
// is replaced, not written through), and returns its path.
func Lock(m *Model, name string) (string, error) {
	b, err := json.MarshalIndent(m.LockManifest(name), "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(m.Dir, ManifestFile)
	tmp, err := os.CreateTemp(m.Dir, ".manifest-*.json")
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", m.Dir, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("lock %s: %w", m.Dir, err)
	}
	return path, nil
}
