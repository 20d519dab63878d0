package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Source is where a model reference ([Open]'s argument) points: a
// directory, or the snapshot of a Hugging Face repo id in the local cache.
type Source struct {
	// Dir is the model's root directory: the one given, or the cache's
	// snapshots/<commit>.
	Dir string
	// RepoID ("BAAI/bge-m3") is set when the model came from the cache, or
	// when Dir is a cache snapshot given as a path.
	RepoID string
	// Revision is the revision asked for ("main" by default) and Commit the
	// snapshot it resolved to; empty for a plain directory.
	Revision, Commit string
}

// repoIDPattern is a Hugging Face repo id with an optional @revision.
var repoIDPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9][A-Za-z0-9._/-]*))?$`)

// Resolve finds the directory ref names. An existing path is a model
// directory. Otherwise a repo id ("org/name" or "org/name@revision") is
// looked up, offline, in the Hugging Face caches ([HubCaches]): the
// snapshot refs/<revision> points to, or snapshots/<revision> for a commit.
// jetembed never downloads; the error of a model not in the cache wraps
// [ErrNotDownloaded], names every path tried and the command that fetches
// it.
func Resolve(ref string) (Source, error) {
	st, statErr := os.Stat(ref)
	if statErr == nil {
		if !st.IsDir() {
			return Source{}, fmt.Errorf("%w: model %s is not a directory", ErrInvalid, ref)
		}
		src := Source{Dir: ref}
		src.RepoID, src.Commit = cacheSnapshotOf(ref)
		return src, nil
	}
	m := repoIDPattern.FindStringSubmatch(ref)
	if m == nil || strings.Contains(ref, "..") {
		return Source{}, fmt.Errorf("%w: model directory: %w", ErrMissingFile, statErr)
	}
	repo, rev := m[1]+"/"+m[2], m[3]
	if rev == "" {
		rev = "main"
	}
	var tried []string
	for _, hub := range HubCaches() {
		base := filepath.Join(hub, "models--"+m[1]+"--"+m[2])
		commit, path, err := snapshotOf(base, rev)
		if err == nil {
			return Source{Dir: path, RepoID: repo, Revision: rev, Commit: commit}, nil
		}
		tried = append(tried, err.Error())
	}
	dl := "huggingface-cli download " + repo
	if m[3] != "" {
		dl += " --revision " + m[3]
	}
	return Source{}, fmt.Errorf("%w: %s is not a directory, and no Hugging Face cache holds revision %s of it (tried %s); "+
		"download it first with `%s` (set HF_HUB_CACHE or HF_HOME to where it goes): jetembed never downloads",
		ErrNotDownloaded, repo, rev, strings.Join(tried, "; "), dl)
}

// snapshotOf finds revision rev under a cache's models--org--name.
func snapshotOf(base, rev string) (commit, dir string, err error) {
	if !filepath.IsLocal(rev) {
		return "", "", fmt.Errorf("revision %q", rev)
	}
	refFile := filepath.Join(base, "refs", rev)
	b, err := os.ReadFile(refFile)
	switch {
	case err == nil:
		commit = strings.TrimSpace(string(b))
		if !isCommit(commit) {
			return "", "", fmt.Errorf("%s holds %q, not a commit", refFile, commit)
		}
	case errors.Is(err, fs.ErrNotExist) && isCommit(rev):
		commit = rev
	default:
		return "", "", fmt.Errorf("%s (no such ref)", refFile)
	}
	dir = filepath.Join(base, "snapshots", commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("%s (no such snapshot)", dir)
	}
	return commit, dir, nil
}

// isCommit reports whether s looks like a git commit hash.
func isCommit(s string) bool {
	if len(s) < 7 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// cacheSnapshotOf recognizes a directory given as a cache path,
// .../models--org--name/snapshots/<commit>, so its model gets the repo's
// name rather than the commit's.
func cacheSnapshotOf(dir string) (repo, commit string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", ""
	}
	snap := filepath.Dir(abs)
	if filepath.Base(snap) != "snapshots" {
		return "", ""
	}
	org, name, ok := strings.Cut(strings.TrimPrefix(filepath.Base(filepath.Dir(snap)), "models--"), "--")
	if !ok || !strings.HasPrefix(filepath.Base(filepath.Dir(snap)), "models--") {
		return "", ""
	}
	return org + "/" + name, filepath.Base(abs)
}

// HubCaches are the Hugging Face hub caches [Resolve] looks in, in order,
// as huggingface_hub places them: HF_HUB_CACHE (or the older
// HUGGINGFACE_HUB_CACHE), HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub and
// ~/.cache/huggingface/hub.
func HubCaches() []string {
	var dirs []string
	add := func(d string) {
		if d != "" && !containsPath(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	add(os.Getenv("HF_HUB_CACHE"))
	add(os.Getenv("HUGGINGFACE_HUB_CACHE"))
	if h := os.Getenv("HF_HOME"); h != "" {
		add(filepath.Join(h, "hub"))
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		add(filepath.Join(x, "huggingface", "hub"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, ".cache", "huggingface", "hub"))
	}
	return dirs
}

func containsPath(dirs []string, d string) bool {
	for _, x := range dirs {
		if filepath.Clean(x) == filepath.Clean(d) {
			return true
		}
	}
	return false
}
