package importrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/jetembed/jetembed"

// anyPkg stands for "any package of the project but cmd/jetembed".
const anyPkg = "*"

// mayImport is, for every package of the project, the project packages
// its non-test code may import directly (paths relative to the module).
// A new package must be added here and say the same in its doc.go.
var mayImport = map[string][]string{
	"schema":                    {},
	"internal/tracehdr":         {},
	"internal/natstest":         {"internal/testkit"},
	"internal/testkit":          {},
	"internal/drain":            {},
	"internal/importrules":      {},
	"internal/walkcount":        {},
	"client":                    {"schema", "internal/tracehdr"},
	"engine/internal/pack":      {},
	"internal/safetensors":      {},
	"internal/torchpt":          {},
	"engine/internal/heads":     {},
	"engine/tokenizer":          {},
	"engine/model":              {"internal/safetensors", "internal/torchpt"},
	"engine/model/modeltest":    {"engine/model", "internal/safetensors"},
	"internal/onnxgen":          {"internal/safetensors"},
	"engine":                    {"schema", "engine/internal/heads", "engine/model", "engine/internal/pack", "internal/safetensors", "engine/tokenizer", "internal/drain"},
	"engine/fakes":              {"engine"},
	"engine/ort":                {"engine", "engine/model", "engine/ort/internal/ctrim"},
	"engine/ort/internal/ctrim": {},
	"engine/ort/enginetest":     {"engine", "engine/model", "engine/ort", "engine/tokenizer"},
	"internal/mallocenv":        {},
	"internal/telemetry":        {"schema", "internal/tracehdr"},
	"internal/telemetry/export": {"internal/telemetry", "internal/tracehdr"},
	"consumer":                  {"engine", "schema", "internal/telemetry"},
	"fleet":                     {"engine", "schema"},
	"jetstream":                 {"client", "consumer", "engine", "fleet", "schema", "internal/telemetry"},
	"jetstream/devserver":       {},
	"jetstream/jstest":          {"jetstream", "internal/natstest"},
	"gateway":                   {"schema", "internal/drain"},
	"node":                      {"jetstream", "consumer", "engine", "fleet", "gateway", "client", "schema", "internal/telemetry"},
	"cmd/internal/bench":        {anyPkg},
	"cmd/internal/bench/fleet":  {},
	"faults":                    {},
	"deploy":                    {},
	"cmd/jetembed":              {anyPkg},
}

// floor is where each package sits: a package imports only packages on a
// lower floor (TestImportsRunDown), so no arrow runs back up. Floor 0 is
// the foundation that imports nothing of the project; test support and
// programs over the stack sit above what they import, wherever their
// folder is (engine/fakes above engine, cmd/internal/bench above node).
// A new package gets a floor here, above everything it imports.
var floor = map[string]int{
	// 0: the foundation: wire types, file formats, the tokenizer, test kits
	// that import nothing of the project.
	"schema": 0, "internal/tracehdr": 0, "internal/testkit": 0, "internal/importrules": 0, "internal/walkcount": 0,
	"internal/safetensors": 0, "internal/torchpt": 0, "internal/mallocenv": 0, "internal/drain": 0,
	"engine/internal/pack": 0, "engine/internal/heads": 0, "engine/tokenizer": 0,
	"engine/ort/internal/ctrim": 0, "faults": 0, "deploy": 0,
	// 1: over the foundation.
	"engine/model": 1, "internal/onnxgen": 1, "internal/natstest": 1, "client": 1,
	"internal/telemetry": 1, "jetstream/devserver": 1,
	// 2: the engine.
	"engine": 2, "engine/model/modeltest": 2, "internal/telemetry/export": 2,
	// 3: over the engine: its ONNX Runtime binding and fakes, the job loop,
	// the fleet.
	"engine/ort": 3, "engine/fakes": 3, "consumer": 3, "fleet": 3,
	// 4: the NATS adapters, and a real engine for tests.
	"jetstream": 4, "engine/ort/enginetest": 4,
	// 5: the HTTP front door and the NATS test rig.
	"gateway": 5, "jetstream/jstest": 5,
	// 6: one serving process.
	"node": 6,
	// 7: programs over the whole stack.
	"cmd/internal/bench": 7, "cmd/internal/bench/fleet": 7,
	"cmd/jetembed": 8,
}

// natsImporters may import nats.go: the NATS adapters (jetstream), the
// producer SDK (client), the node that owns the connection and its
// reconnects, and the test kit (natstest, jstest). The gateway needs not (it reaches the fleet
// through its Requester), nor cmd/jetembed: it parses flags into configs
// and hands the connection handles jetstream returns to client and
// node without naming their types.
var natsImporters = []string{"jetstream", "client", "node", "internal/natstest", "jetstream/jstest"}

// cgoPackage is the one package of the project with cgo files of its own:
// glibc's malloc_trim for engine/ort (ONNX Runtime's cgo is in the
// onnxruntime_go binding).
const cgoPackage = "engine/ort/internal/ctrim"

// serverImporters may import nats-server: the dev server and the test kit.
var serverImporters = []string{"jetstream/devserver", "internal/natstest"}

type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	CgoFiles   []string
	Error      *struct{ Err string }
}

// list runs go list -deps -json on patterns from the module root.
func list(t *testing.T, args ...string) map[string]*pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command(goBin, append([]string{"list", "-deps", "-json"}, args...)...)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// rel is p relative to the module, or "" outside it.
func rel(p string) string {
	if p == mod {
		return "."
	}
	if r, ok := strings.CutPrefix(p, mod+"/"); ok {
		return r
	}
	return ""
}

// cgoUsers reports, for every non-standard package, whether it or one of
// its non-standard dependencies has cgo files.
func cgoUsers(pkgs map[string]*pkg) map[string]bool {
	uses := map[string]bool{}
	var visit func(string) bool
	visit = func(path string) bool {
		if v, ok := uses[path]; ok {
			return v
		}
		p := pkgs[path]
		if p == nil || p.Standard {
			return false
		}
		uses[path] = false // cycles cannot happen in Go; this guards the recursion anyway
		v := len(p.CgoFiles) > 0
		for _, imp := range p.Imports {
			v = visit(imp) || v
		}
		uses[path] = v
		return v
	}
	for path := range pkgs {
		visit(path)
	}
	return uses
}

func TestImportRules(t *testing.T) {
	pkgs := list(t, "./...")
	uses := cgoUsers(pkgs)
	for path, p := range pkgs {
		r := rel(path)
		if r == "" {
			continue
		}
		if p.Error != nil {
			t.Errorf("%s: %s", r, p.Error.Err)
			continue
		}
		allowed, known := mayImport[r]
		if !known {
			t.Errorf("%s is not in mayImport: add it, and say what it may import in its doc.go", r)
			continue
		}
		for _, imp := range p.Imports {
			ir := rel(imp)
			switch {
			case ir != "":
				if ir == "cmd/jetembed" || !(slices.Contains(allowed, anyPkg) || slices.Contains(allowed, ir)) {
					t.Errorf("%s imports %s; it may import only %v", r, ir, allowed)
				}
			case strings.HasPrefix(imp, "github.com/nats-io/nats.go"):
				if !slices.Contains(natsImporters, r) {
					t.Errorf("%s imports %s; only %v may", r, imp, natsImporters)
				}
			case strings.HasPrefix(imp, "github.com/nats-io/nats-server"):
				if !slices.Contains(serverImporters, r) {
					t.Errorf("%s imports %s; only %v may", r, imp, serverImporters)
				}
			case uses[imp] && r != "engine/ort":
				t.Errorf("%s imports %s, which uses cgo; only engine/ort may (and engine/tokenizer with -tags hftokenizers)", r, imp)
			}
		}
		if len(p.CgoFiles) > 0 && r != cgoPackage {
			t.Errorf("%s has cgo files %v; cgo stays in the bindings engine/ort imports (and %s's malloc_trim)", r, p.CgoFiles, cgoPackage)
		}
		if r == "engine" || strings.HasPrefix(r, "engine/") {
			for _, d := range p.Deps {
				if strings.HasPrefix(d, "github.com/nats-io/") {
					t.Errorf("%s depends on %s; the engine knows no NATS", r, d)
				}
			}
		}
	}
}

// sdkPaths are the OpenTelemetry SDK and the exporters (and the
// Prometheus client they export to): what a process wires up, not what a
// library records through.
var sdkPaths = []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/contrib/exporters", "github.com/prometheus/client_golang"}

// TestLibrariesPullNoSDK: the packages a Go program embeds record through
// the OpenTelemetry API (internal/telemetry); only cmd/jetembed, through
// internal/telemetry/export, pulls the SDK and the exporters. The gateway
// registers its own Prometheus collectors (the node, which serves it,
// pulls those too) and the bench and test rigs are not libraries, so they
// are left out.
func TestLibrariesPullNoSDK(t *testing.T) {
	libs := []string{"schema", "client", "engine", "engine/ort", "consumer", "fleet", "jetstream", "node", "internal/telemetry"}
	args := make([]string, len(libs))
	for i, l := range libs {
		args[i] = "./" + l
	}
	pkgs := list(t, args...)
	for _, l := range libs {
		p := pkgs[mod+"/"+l]
		if p == nil {
			t.Fatalf("go list gave no %s", l)
		}
		for _, d := range p.Deps {
			for _, bad := range sdkPaths {
				// The node serves the gateway, which registers its own
				// Prometheus collectors on the registry it is given.
				if l == "node" && bad == "github.com/prometheus/client_golang" {
					continue
				}
				if strings.HasPrefix(d, bad) {
					t.Errorf("%s depends on %s; record through internal/telemetry, wire the SDK in cmd/jetembed", l, d)
				}
			}
		}
	}
	if ok := slices.ContainsFunc(list(t, "./internal/telemetry/export")[mod+"/internal/telemetry/export"].Deps, func(d string) bool {
		return strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk")
	}); !ok {
		t.Error("internal/telemetry/export does not depend on the SDK; the rule above checks nothing")
	}
}

// TestClientPullsNoServerSide: a producer importing client gets no
// nats-server, no ONNX Runtime and no OpenTelemetry SDK or exporter.
func TestClientPullsNoServerSide(t *testing.T) {
	pkgs := list(t, "./client")
	for _, d := range pkgs[mod+"/client"].Deps {
		for _, bad := range []string{"github.com/nats-io/nats-server", "onnxruntime", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/contrib/exporters"} {
			if strings.Contains(d, bad) {
				t.Errorf("client depends on %s", d)
			}
		}
	}
}

// TestCgoOnlyInHFBackend: with -tags hftokenizers, engine/tokenizer links
// the Rust tokenizers through cgo, and nothing else of the engine starts to.
func TestCgoOnlyInHFBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the hftokenizers build")
	}
	pkgs := list(t, "-tags", "hftokenizers", "./engine/...")
	uses := cgoUsers(pkgs)
	tok := pkgs[mod+"/engine/tokenizer"]
	if !slices.ContainsFunc(tok.Imports, func(imp string) bool { return uses[imp] }) {
		t.Errorf("engine/tokenizer with -tags hftokenizers imports no cgo package; the rule below checks nothing")
	}
	for path, p := range pkgs {
		r := rel(path)
		if r == "" || r == "engine/tokenizer" || r == "engine/ort" {
			continue
		}
		for _, imp := range p.Imports {
			if rel(imp) == "" && uses[imp] {
				t.Errorf("%s imports %s, which uses cgo", r, imp)
			}
		}
	}
}

// upward lists the imports of graph (package -> the project packages it
// imports) that do not run down: to a package on the same floor or
// higher, or to or from a package that has no floor.
func upward(graph map[string][]string, floor map[string]int) []string {
	var bad []string
	for from, imps := range graph {
		f, ok := floor[from]
		if !ok {
			bad = append(bad, from+" has no floor: add it to floor, above what it imports")
			continue
		}
		for _, imp := range imps {
			g, ok := floor[imp]
			switch {
			case !ok:
				bad = append(bad, from+" imports "+imp+", which has no floor")
			case g >= f:
				bad = append(bad, fmt.Sprintf("%s (floor %d) imports %s (floor %d): imports run down only", from, f, imp, g))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportsRunDown: every project import of every package, and every
// import mayImport allows, goes to a lower floor.
func TestImportsRunDown(t *testing.T) {
	graph := map[string][]string{}
	for path, p := range list(t, "./...") {
		r := rel(path)
		if r == "" {
			continue
		}
		graph[r] = nil
		for _, imp := range p.Imports {
			if ir := rel(imp); ir != "" {
				graph[r] = append(graph[r], ir)
			}
		}
	}
	for _, msg := range upward(graph, floor) {
		t.Error(msg)
	}
	allowed := map[string][]string{}
	for from, imps := range mayImport {
		allowed[from] = slices.DeleteFunc(slices.Clone(imps), func(s string) bool { return s == anyPkg })
	}
	for _, msg := range upward(allowed, floor) {
		t.Errorf("mayImport allows an upward import: %s", msg)
	}
}

// TestUpwardImportFails: the floor check reports an import that runs up
// (the engine importing the job loop) or sideways, and one to a package
// with no floor.
func TestUpwardImportFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		graph map[string][]string
	}{
		{"up", map[string][]string{"engine": {"consumer"}}},
		{"sideways", map[string][]string{"consumer": {"fleet"}}},
		{"unknown", map[string][]string{"consumer": {"nowhere"}}},
		{"no floor", map[string][]string{"nowhere": {"schema"}}},
	} {
		if got := upward(tc.graph, floor); len(got) != 1 {
			t.Errorf("%s: upward(%v) = %q, want one finding", tc.name, tc.graph, got)
		}
	}
	if got := upward(map[string][]string{"consumer": {"engine", "schema"}}, floor); len(got) != 0 {
		t.Errorf("downward imports reported: %q", got)
	}
}
