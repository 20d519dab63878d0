package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// TestReadmeMetrics checks the documentation's metric names against the
// ones telemetry exposes, both ways, so a renamed metric cannot leave the
// operations page (and the alerts people copy from it) behind: every name
// the README or a page of docs/ mentions exists, and every metric is on the
// operations page.
func TestReadmeMetrics(t *testing.T) {
	names := append(slices.Clone(telemetry.MetricNames), gateway.MetricNames...)
	metrics := func(text string) map[string]bool {
		mentioned := map[string]bool{}
		for _, m := range regexp.MustCompile(`jetembed_[a-z_]+`).FindAllString(text, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base := strings.TrimSuffix(m, suffix); base != m && slices.Contains(names, base) {
					m = base
				}
			}
			mentioned[m] = true
		}
		return mentioned
	}
	for m := range metrics(allDocs(t)) {
		if !slices.Contains(names, m) {
			t.Errorf("the documentation mentions metric %s, which neither telemetry nor the gateway exposes", m)
		}
	}
	onOps := metrics(readDoc(t, opsPage))
	for _, m := range names {
		if !onOps[m] {
			t.Errorf("metric %s is not in %s", m, opsPage)
		}
	}
}

// TestGatewayMapsEveryCode checks that the HTTP gateway has a status for
// every error code of the wire contract, and that the HTTP API page's error
// table names it.
func TestGatewayMapsEveryCode(t *testing.T) {
	page := readDoc(t, httpAPIPage)
	for _, c := range schemaCodes(t) {
		if _, ok := gateway.CodeStatus(schema.Code(c)); !ok {
			t.Errorf("the gateway has no HTTP status for code %s", c)
		}
		if !strings.Contains(page, "`"+c+"`") {
			t.Errorf("%s does not name code %s", httpAPIPage, c)
		}
	}
}

// schemaCodes returns the values of the Code constants declared in package
// schema, read from its source so that a new code cannot be missed.
func schemaCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../schema/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						codes = append(codes, s)
					}
				}
			}
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in schema: %v", len(codes), codes)
	}
	return codes
}

// TestReadmeErrorCodes checks the wire contract's error code table against
// the codes of package schema, both ways, and its Retriable column against
// [schema.Code.Retriable].
func TestReadmeErrorCodes(t *testing.T) {
	rows := regexp.MustCompile("(?m)^\\| `([a-z_0-9]+)` \\| (job|item) \\| (yes|no) \\|").FindAllStringSubmatch(readDoc(t, wirePage), -1)
	documented := map[string]bool{}
	for _, r := range rows {
		documented[r[1]] = true
		if got, want := r[3] == "yes", schema.Code(r[1]).Retriable(); got != want {
			t.Errorf("%s says %s retriable=%s; schema says %v", wirePage, r[1], r[3], want)
		}
	}
	codes := schemaCodes(t)
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("error code %s is not in the table of %s", c, wirePage)
		}
	}
	for c := range documented {
		if !slices.Contains(codes, c) {
			t.Errorf("%s documents error code %s, which schema does not define", wirePage, c)
		}
	}
}

// TestReadmeGoExample builds every Go program of the documentation (the
// README's quick start, and any ```go block with a main package in docs/)
// against the packages of this tree, so the documented client API cannot
// drift from the real one.
func TestReadmeGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	program := regexp.MustCompile("(?s)```go\n(package main\n.*?)```")
	if !program.MatchString(readDoc(t, readmePath)) {
		t.Fatal("README.md has no ```go block with a main package (the quick start's)")
	}
	programs := program.FindAllStringSubmatch(allDocs(t), -1)
	// Each program builds inside the module, against this tree's packages,
	// through an overlay: nothing is written into the shared work tree.
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range programs {
		tmp := t.TempDir()
		src, overlay := filepath.Join(tmp, "main.go"), filepath.Join(tmp, "overlay.json")
		if err := os.WriteFile(src, []byte(m[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		ov, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, ".readme-example", "main.go"): src}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(overlay, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goBin, "build", "-overlay", overlay, "-o", os.DevNull, "./.readme-example")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			first, _, _ := strings.Cut(m[1], "\nfunc ")
			t.Errorf("Go program %d of the documentation does not build: %v\n%s\n(its start:\n%s)", i+1, err, out, first)
		}
	}
}
