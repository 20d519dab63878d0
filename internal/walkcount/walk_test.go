package walkcount

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/jetembed/jetembed"

// start is where the walk begins: the job loop's runJob.
var start = [2]string{"consumer", "runJob"}

// resolved are the interfaces the walk follows into one implementation,
// as docs/architecture.md says: the engine behind the Embedder, the
// JetStream publisher behind the Publisher and the BlobStore. A call
// through any other interface (Metrics, Message, Cache, UsageRecorder...)
// is not entered; the test logs them.
var resolved = map[string][2]string{
	"engine.Embedder":    {"engine", "Engine"},
	"consumer.Publisher": {"jetstream", "Publisher"},
	"consumer.BlobStore": {"jetstream", "Publisher"},
}

// notEntered are the project packages the walk does not go into: the
// tokenizer, the heads and the packer.
var notEntered = []string{"engine/tokenizer", "engine/internal/heads", "engine/internal/pack"}

// mainPath is the success path of one stored job with a reply subject, no
// cache, a result within the limits: the functions, in the order they
// run, that the main-path walk enters (every other call is stepped over,
// and so is the block of an if that ends in a return: a success takes no
// early exit, but the ones of earlyOut).
// Names are package-relative: "consumer.(*Loop).runJob".
var mainPath = []string{
	"consumer.(*Loop).runJob",
	"consumer.(*job).expired",
	"consumer.(*job).since",
	"consumer.(*job).outputs",
	"engine.OutputsOf",
	"schema.(*Job).Truncates",
	"consumer.startRun",
	"consumer.(*job).producer",
	"internal/telemetry.ExtractHeaders",
	"internal/tracehdr.Extract",
	"internal/telemetry.Tracer",
	"consumer.(*Loop).embedTexts",
	"consumer.makeCacheKey",
	"consumer.(*flights).claim",
	"consumer.(*Loop).run",
	"consumer.(*Loop).runCall",
	"consumer.(*Loop).call",
	"consumer.(*Loop).embed",
	"engine.(*Engine).Embed",
	"engine.(*Engine).tokenize",
	"engine.(*Engine).checkOutputLimit",
	"engine.(*admission).acquire",
	"engine.(*pool).available",
	"engine.(*sched).enqueue",
	"engine.(*Engine).wait",
	"engine.(*Engine).collect",
	"engine.(*Engine).FatalErr",
	"engine.(*admission).release",
	"consumer.(*flights).land",
	"consumer.(*job).ranReport",
	"consumer.endRun",
	"internal/telemetry.ChunkShape",
	"consumer.(*Loop).safeAssemble",
	"consumer.(*Loop).assemble",
	"schema.(*Result).EchoMeta",
	"engine.(*Embedding).Item",
	"consumer.(*Loop).runTokens",
	"consumer.(*Loop).decide",
	"consumer.(*Loop).settle",
	"consumer.(*job).startPublish",
	"internal/telemetry.Job",
	"consumer.(*Loop).deadLetter",
	"consumer.(*Loop).sendResult",
	"schema.EncodeResult",
	"schema.ResultHeader",
	"consumer.(*job).resultMsgID",
	"schema.ResultMsgID",
	"consumer.(*job).replySubject",
	"consumer.header",
	"internal/telemetry.InjectHeaders",
	"internal/tracehdr.Inject",
	"consumer.(*Loop).payloadLimit",
	"consumer.(*job).local",
	"consumer.msgSize",
	"jetstream.(*Publisher).PublishResult",
	"jetstream.withTimeout",
	"jetstream.matchesAny",
	"jetstream.matchSubject",
	"jetstream.deniedTracker",
	"jetstream.(*denials).mark",
	"consumer.(*Loop).recordUsage",
	"consumer.(*Loop).usageOf",
	"consumer.cachedOf",
	"consumer.(*Loop).record",
	"consumer.(*Loop).recordItems",
	"consumer.(verdict).String",
	"consumer.(*Loop).ackMessage",
	"consumer.endPublish",
	"consumer.(*Loop).release",
	"consumer.(*job).releaseBudget",
	"consumer.(*job).wake",
	"consumer.(*job).wakeLocked",
}

// earlyOut are the functions of the main path that a success leaves at
// their first guard: deadLetter, with no dead letter to store.
var earlyOut = []string{"consumer.(*Loop).deadLetter"}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Standard   bool
	Error      *struct{ Err string }
}

type fn struct {
	decl *ast.FuncDecl
	info *types.Info
	file string // relative to the module
}

// program is the project's packages on the walk, type-checked from source
// (every other package from its export data).
type program struct {
	root  string
	pkgs  map[string]*types.Package // by path relative to the module
	funcs map[*types.Func]fn
	objs  map[*ast.FuncDecl]*types.Func
}

func load(t *testing.T) *program {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	cmd := exec.Command(goBin, "list", "-export", "-deps", "-json", "./consumer", "./engine", "./jetstream")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var order []*listed
	exports := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(listed)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("%s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		order = append(order, p)
	}
	fset := token.NewFileSet()
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if f := exports[path]; f != "" {
			return os.Open(f)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	prog := &program{root: root, pkgs: map[string]*types.Package{}, funcs: map[*types.Func]fn{}, objs: map[*ast.FuncDecl]*types.Func{}}
	byPath := map[string]*types.Package{}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p := byPath[path]; p != nil {
			return p, nil
		}
		return gc.Import(path)
	})
	// go list -deps lists every package after its dependencies.
	for _, p := range order {
		rel, ok := relPath(p.ImportPath)
		if !ok {
			continue
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{
			Defs:       map[*ast.Ident]types.Object{},
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
			Types:      map[ast.Expr]types.TypeAndValue{},
		}
		pkg, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info)
		if err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		byPath[p.ImportPath], prog.pkgs[rel] = pkg, pkg
		for _, f := range files {
			name, _ := filepath.Rel(root, fset.File(f.Pos()).Name())
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					f := info.Defs[fd.Name].(*types.Func)
					prog.funcs[f] = fn{decl: fd, info: info, file: filepath.ToSlash(name)}
					prog.objs[fd] = f
				}
			}
		}
	}
	return prog
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func relPath(path string) (string, bool) {
	if path == mod {
		return ".", true
	}
	return strings.CutPrefix(path, mod+"/")
}

// name is f as mainPath spells it: "consumer.(*Loop).runJob".
func name(f *types.Func) string {
	rel, _ := relPath(f.Pkg().Path())
	s := f.Name()
	if recv := f.Signature().Recv(); recv != nil {
		s = "(" + types.TypeString(recv.Type(), func(*types.Package) string { return "" }) + ")." + s
	}
	return rel + "." + s
}

// walk is one depth-first walk of the static calls.
type walk struct {
	prog   *program
	follow func(*types.Func) bool
	// guards: step over the block of an if that ends in a return (its
	// condition is walked): the early exits a success does not take; in
	// the functions of earlyOut, the first such return is taken.
	guards     bool
	stop       bool
	seen       map[*types.Func]bool
	entered    map[string]bool
	cur        string
	funcs      int
	returns    int
	returnsIn  map[string]int // returns by the directory of the file returned to
	trail      []string
	unresolved map[string]bool
}

func newWalk(prog *program, follow func(*types.Func) bool) *walk {
	return &walk{prog: prog, follow: follow, seen: map[*types.Func]bool{}, entered: map[string]bool{}, returnsIn: map[string]int{}, unresolved: map[string]bool{}}
}

// enter moves the reader to file, counting a return when it had been
// there before and left.
func (w *walk) enter(file string) {
	if file == w.cur {
		return
	}
	mark := ""
	if w.entered[file] {
		w.returns++
		w.returnsIn[filepath.Dir(file)]++
		mark = " (back)"
	}
	w.entered[file], w.cur = true, file
	w.trail = append(w.trail, file+mark)
}

func (w *walk) function(f *types.Func) {
	if w.seen[f] {
		return
	}
	w.seen[f] = true
	src := w.prog.funcs[f]
	w.funcs++
	w.enter(src.file)
	w.trail = append(w.trail, "    "+name(f))
	var deferred []*ast.CallExpr
	stop := w.stop
	w.stop = false
	w.node(src, src.decl.Body, &deferred)
	w.stop = false
	// Deferred calls run last, the last deferred first.
	for _, call := range slices.Backward(deferred) {
		w.call(src, call, &deferred)
	}
	w.stop = stop
}

// node walks the calls under n in the order they run: a call's function
// value and arguments before the call, a deferred call at the end of its
// function, a function literal's body where it stands.
func (w *walk) node(src fn, n ast.Node, deferred *[]*ast.CallExpr) {
	if n == nil {
		return
	}
	ast.Inspect(n, func(m ast.Node) bool {
		if w.stop {
			return false
		}
		switch m := m.(type) {
		case *ast.IfStmt:
			if !w.guards || !endsInReturn(m.Body) {
				return true
			}
			w.node(src, m.Init, deferred)
			w.node(src, m.Cond, deferred)
			if slices.Contains(earlyOut, name(w.prog.objs[src.decl])) {
				w.node(src, m.Body, deferred)
				w.stop = true
				return false
			}
			if m.Else != nil {
				w.node(src, m.Else, deferred)
			}
			return false
		case *ast.DeferStmt:
			if _, lit := ast.Unparen(m.Call.Fun).(*ast.FuncLit); !lit {
				w.node(src, m.Call.Fun, deferred)
				for _, a := range m.Call.Args {
					w.node(src, a, deferred)
				}
			}
			*deferred = append(*deferred, m.Call)
			return false
		case *ast.CallExpr:
			w.node(src, m.Fun, deferred)
			for _, a := range m.Args {
				w.node(src, a, deferred)
			}
			if f := w.callee(src.info, m); f != nil {
				w.function(f)
				w.enter(src.file)
			}
			return false
		}
		return true
	})
}

func endsInReturn(b *ast.BlockStmt) bool {
	if len(b.List) == 0 {
		return false
	}
	_, ok := b.List[len(b.List)-1].(*ast.ReturnStmt)
	return ok
}

// call walks a deferred call: a function literal's body, or the call.
func (w *walk) call(src fn, c *ast.CallExpr, deferred *[]*ast.CallExpr) {
	if lit, ok := ast.Unparen(c.Fun).(*ast.FuncLit); ok {
		w.node(src, lit.Body, deferred)
		for _, a := range c.Args {
			w.node(src, a, deferred)
		}
		return
	}
	if f := w.callee(src.info, c); f != nil {
		w.function(f)
		w.enter(src.file)
	}
}

// callee is the project function c calls statically, or nil.
func (w *walk) callee(info *types.Info, c *ast.CallExpr) *types.Func {
	fun := ast.Unparen(c.Fun)
	switch x := fun.(type) {
	case *ast.IndexExpr:
		fun = x.X
	case *ast.IndexListExpr:
		fun = x.X
	}
	var f *types.Func
	switch x := fun.(type) {
	case *ast.Ident:
		f, _ = info.Uses[x].(*types.Func)
	case *ast.SelectorExpr:
		sel := info.Selections[x]
		if sel == nil { // a qualified name: pkg.F
			f, _ = info.Uses[x.Sel].(*types.Func)
			break
		}
		if sel.Kind() == types.FieldVal {
			return nil // a func-typed field: no static callee
		}
		f, _ = sel.Obj().(*types.Func)
		if f != nil && types.IsInterface(sel.Recv()) {
			f = w.resolve(sel.Recv(), f)
		}
	}
	if f == nil || f.Pkg() == nil {
		return nil
	}
	f = f.Origin()
	rel, ok := relPath(f.Pkg().Path())
	if !ok || slices.Contains(notEntered, rel) {
		return nil
	}
	if _, ok := w.prog.funcs[f]; !ok || !w.follow(f) {
		return nil
	}
	return f
}

// resolve is the implementation of interface method m the walk follows,
// or nil.
func (w *walk) resolve(recv types.Type, m *types.Func) *types.Func {
	named, _ := types.Unalias(recv).(*types.Named)
	if named != nil && named.Obj().Pkg() != nil {
		rel, _ := relPath(named.Obj().Pkg().Path())
		if impl, ok := resolved[rel+"."+named.Obj().Name()]; ok {
			if pkg := w.prog.pkgs[impl[0]]; pkg != nil {
				if tn, _ := pkg.Scope().Lookup(impl[1]).(*types.TypeName); tn != nil {
					obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, m.Pkg(), m.Name())
					if f, ok := obj.(*types.Func); ok {
						return f
					}
				}
			}
		}
	}
	if named != nil && named.Obj().Pkg() != nil {
		if rel, ok := relPath(named.Obj().Pkg().Path()); ok {
			w.unresolved[rel+"."+named.Obj().Name()+"."+m.Name()] = true
		}
	}
	return nil
}

func (w *walk) report(t *testing.T, what string) {
	t.Helper()
	dirs := make([]string, 0, len(w.returnsIn))
	for d := range w.returnsIn {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	var by []string
	for _, d := range dirs {
		by = append(by, fmt.Sprintf("%s/ %d", d, w.returnsIn[d]))
	}
	t.Logf("%s: %d functions, %d files, %d returns (%s)", what, w.funcs, len(w.entered), w.returns, strings.Join(by, ", "))
}

// TestWalk walks from runJob twice, every static call of the project's
// code and the main path only, and logs the counts (-v). With WALK_TRAIL=1
// in the environment it logs the files and functions in the order the
// walk enters them, "(back)" marking a return.
func TestWalk(t *testing.T) {
	prog := load(t)
	var runJob *types.Func
	for f := range prog.funcs {
		if rel, _ := relPath(f.Pkg().Path()); rel == start[0] && f.Name() == start[1] {
			runJob = f
		}
	}
	if runJob == nil {
		t.Fatalf("no %s.%s", start[0], start[1])
	}
	all := newWalk(prog, func(*types.Func) bool { return true })
	all.function(runJob)
	main := newWalk(prog, func(f *types.Func) bool { return slices.Contains(mainPath, name(f)) })
	main.guards = true
	main.function(runJob)
	for _, n := range mainPath {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(main.seen)), func(f *types.Func) bool { return name(f) == n }) {
			t.Errorf("the main path does not reach %s: fix mainPath", n)
		}
	}
	if os.Getenv("WALK_TRAIL") != "" {
		t.Logf("all calls:\n%s", strings.Join(all.trail, "\n"))
		t.Logf("main path:\n%s", strings.Join(main.trail, "\n"))
	}
	var un []string
	for k := range all.unresolved {
		un = append(un, k)
	}
	slices.Sort(un)
	t.Logf("calls through the project's interfaces not entered: %s", strings.Join(un, ", "))
	all.report(t, "all calls")
	main.report(t, "main path")
}
