package importrules

import (
	"bytes"
	"encoding/json"
	"errors"
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
	"internal/importrules":      {},
	"internal/enginetest":       {"engine", "engine/model", "engine/ort", "engine/tokenizer"},
	"client":                    {"schema", "internal/tracehdr"},
	"engine/internal/pack":      {},
	"internal/safetensors":      {},
	"internal/torchpt":          {},
	"engine/internal/heads":     {},
	"engine/tokenizer":          {},
	"engine/model":              {"internal/safetensors", "internal/torchpt"},
	"engine/model/modeltest":    {"engine/model", "internal/safetensors"},
	"internal/onnxgen":          {"internal/safetensors"},
	"engine":                    {"schema", "engine/internal/heads", "engine/model", "engine/internal/pack", "internal/safetensors", "engine/tokenizer"},
	"engine/ort":                {"engine", "engine/model", "engine/ort/internal/ctrim"},
	"engine/ort/internal/ctrim": {},
	"internal/mallocenv":        {},
	"internal/devserver":        {},
	"internal/telemetry":        {"schema", "internal/tracehdr"},
	"internal/telemetry/export": {"internal/telemetry", "internal/tracehdr"},
	"jobloop":                   {"engine", "schema", "internal/telemetry"},
	"fleet":                     {"engine", "schema"},
	"jetstream":                 {"client", "jobloop", "engine", "fleet", "schema", "internal/telemetry"},
	"gateway":                   {"schema"},
	"runtime":                   {"jetstream", "jobloop", "engine", "fleet", "gateway", "client", "schema", "internal/telemetry"},
	"jetstream/jstest":          {"jetstream", "internal/natstest"},
	"internal/fakes":            {"engine"},
	"internal/bench":            {anyPkg},
	"internal/bench/fleet":      {},
	"faults":                    {},
	"deploy":                    {},
	"cmd/jetembed":              {anyPkg},
}

// natsImporters may import nats.go: the NATS adapters (jetstream), the
// producer SDK (client), the runtime that owns the connection and its
// reconnects, and the test kit (natstest, jstest). The gateway needs not (it reaches the fleet
// through its Requester), nor cmd/jetembed: it parses flags into configs
// and hands the connection handles jetstream returns to client and
// runtime without naming their types.
var natsImporters = []string{"jetstream", "client", "runtime", "internal/natstest", "jetstream/jstest"}

// cgoPackage is the one package of the project with cgo files of its own:
// glibc's malloc_trim for engine/ort (ONNX Runtime's cgo is in the
// onnxruntime_go binding).
const cgoPackage = "engine/ort/internal/ctrim"

// serverImporters may import nats-server: the dev server and the test kit.
var serverImporters = []string{"internal/devserver", "internal/natstest"}

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
// registers its own Prometheus collectors (the runtime, which serves it,
// pulls those too) and the bench and test rigs are not libraries, so they
// are left out.
func TestLibrariesPullNoSDK(t *testing.T) {
	libs := []string{"schema", "client", "engine", "engine/ort", "jobloop", "fleet", "jetstream", "runtime", "internal/telemetry"}
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
				// The runtime serves the gateway, which registers its own
				// Prometheus collectors on the registry it is given.
				if l == "runtime" && bad == "github.com/prometheus/client_golang" {
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
