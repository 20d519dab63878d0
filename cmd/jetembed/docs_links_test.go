package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation's Markdown files link to each other by relative paths
// and heading anchors; sections move between pages, and an anchor that no
// heading makes any more is a link that silently goes nowhere on GitHub.
// TestDocLinks checks every relative link of every Markdown file of the
// tree (README.md, docs/, deploy/, schema/, testdata/, ...) both ways a link
// can rot: the file it names exists, and the anchor it names is a heading
// (or an explicit <a id>) of that file.

var (
	fence      = regexp.MustCompile("(?ms)^ {0,3}(```|~~~).*?^ {0,3}(```|~~~)[^\n]*$")
	codeSpan   = regexp.MustCompile("(`+)[^`]*?(`+)")
	mdLink     = regexp.MustCompile(`!?\[([^\[\]]*)\]\(\s*<?([^()<>\s]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	heading    = regexp.MustCompile(`(?m)^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	urlScheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)
)

// stripCode blanks fenced code blocks (keeping their lines, for line
// numbers) and replaces inline code spans by a word, so a link whose text is
// code still parses and an example in code is not taken for a link.
func stripCode(md string) string {
	md = fence.ReplaceAllStringFunc(md, func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	return codeSpan.ReplaceAllStringFunc(md, func(s string) string {
		return "code" + strings.Repeat("\n", strings.Count(s, "\n"))
	})
}

// slug is GitHub's anchor for a heading: the rendered text lower-cased,
// every character but letters, digits, '-', '_' and spaces dropped, and
// spaces turned into '-'.
func slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1") // a link renders as its text
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown text: one per heading (a
// repeated heading gets -1, -2, ... as on GitHub) and each <a id>.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	noFence := fence.ReplaceAllString(md, "")
	for _, m := range heading.FindAllStringSubmatch(noFence, -1) {
		s := slug(m[2])
		a := s
		for n := 1; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", s, n)
		}
		out[a] = true
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(noFence, -1) {
		out[m[1]] = true
	}
	return out
}

// markdownFiles lists the Markdown files under root, leaving out hidden
// directories (.git, .deps), node_modules and build output.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin" || name == "jetembed-data") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// brokenLinks returns a line for every relative link of the Markdown files
// under root whose file does not exist or whose anchor names no heading.
func brokenLinks(t *testing.T, root string) (broken []string, checked int) {
	t.Helper()
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	for _, file := range markdownFiles(t, root) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := stripCode(string(b))
		rel, _ := filepath.Rel(root, file)
		var targets [][2]int // byte offsets of each target in text
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			targets = append(targets, [2]int{m[4], m[5]})
		}
		for _, m := range refDef.FindAllStringSubmatchIndex(text, -1) {
			targets = append(targets, [2]int{m[2], m[3]})
		}
		for _, span := range targets {
			target := text[span[0]:span[1]]
			line := 1 + strings.Count(text[:span[0]], "\n")
			if target == "" || urlScheme.MatchString(target) || strings.HasPrefix(target, "//") {
				continue // an absolute URL: not ours to check offline
			}
			checked++
			where := fmt.Sprintf("%s:%d: (%s)", rel, line, target)
			p, anchor, _ := strings.Cut(target, "#")
			dest := file
			if p != "" {
				if strings.HasPrefix(p, "/") {
					broken = append(broken, where+": an absolute path; link relative to the file")
					continue
				}
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, where+": no such file or directory")
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				if !lineAnchor.MatchString(anchor) {
					broken = append(broken, where+": an anchor into a file that is not Markdown")
				}
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				broken = append(broken, where+": "+err.Error())
				continue
			}
			if !a[anchor] {
				broken = append(broken, fmt.Sprintf("%s: no heading makes #%s in %s", where, anchor, filepath.Base(dest)))
			}
		}
	}
	return broken, checked
}

func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	broken, checked := brokenLinks(t, root)
	for _, b := range broken {
		t.Error(b)
	}
	if checked < 50 {
		t.Errorf("checked only %d relative links: is the parser blind?", checked)
	}
}

// TestDocLinksFindsBrokenOnes runs the checker on a small tree with one
// good and several broken links of each kind.
func TestDocLinksFindsBrokenOnes(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/page.md", "# Page\n\n## HTTP API: OpenAI, TEI and BGE-M3 server clients\n\n"+
		"### What `--model` accepts\n\n### Integrity: digests, `model lock`, `--verify`\n\n"+
		"## Notes\n\n## Notes\n\n<a id=\"custom\"></a>\n\n```\n## Not a heading\n[in code](missing.md)\n```\n")
	write("main.go", "package main\n")
	write("node_modules/x/README.md", "[ignored](nowhere.md)\n")
	write("README.md", "# Top\n\n"+
		"[ok](docs/page.md#http-api-openai-tei-and-bge-m3-server-clients)\n"+
		"[ok](docs/page.md#what---model-accepts) [`ok`](docs/page.md#integrity-digests-model-lock---verify)\n"+
		"[ok](docs/page.md#notes-1) [ok](docs/page.md#custom) [ok](#top) [ok](main.go) [ok](main.go#L1)\n"+
		"[ok](https://example.com/x.md#nothing) `[in a code span](gone.md)`\n"+
		"[bad\nfile](docs/gone.md)\n"+
		"[bad anchor](docs/page.md#notes-2)\n"+
		"[bad self](#bottom)\n"+
		"[bad code heading](docs/page.md#not-a-heading)\n"+
		"[bad non-md anchor](main.go#section)\n"+
		"[bad absolute](/docs/page.md)\n"+
		"[ref]: docs/also-gone.md\n")
	broken, checked := brokenLinks(t, root)
	want := []string{
		"README.md:8: (docs/gone.md): no such file or directory",
		"README.md:9: (docs/page.md#notes-2): no heading makes #notes-2 in page.md",
		"README.md:10: (#bottom): no heading makes #bottom in README.md",
		"README.md:11: (docs/page.md#not-a-heading): no heading makes #not-a-heading in page.md",
		"README.md:12: (main.go#section): an anchor into a file that is not Markdown",
		"README.md:13: (/docs/page.md): an absolute path; link relative to the file",
		"README.md:14: (docs/also-gone.md): no such file or directory",
	}
	if !slices.Equal(broken, want) {
		t.Errorf("broken links:\n got %q\nwant %q", broken, want)
	}
	if checked != 15 {
		t.Errorf("checked %d links, want 15", checked)
	}
}
