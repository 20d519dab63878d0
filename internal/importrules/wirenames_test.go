package importrules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// wireNames are the names of the default deployment that package schema
// defines.
var wireNames = []string{
	schema.SubjectJobs, schema.SubjectResults, schema.SubjectDLQ, schema.SubjectService,
	schema.SubjectEmbed, schema.SubjectRerank, schema.SubjectTokenize,
	schema.StreamJobs, schema.StreamResults, schema.StreamDLQ, schema.ConsumerName,
	schema.BucketEngines, schema.BucketBlobs, schema.SubjectUsage, schema.StreamUsage,
	schema.BucketCache,
}

// TestWireNamesInSchema: the subjects, streams and buckets producers and
// the fleet agree on are spelled once, in schema; no other package's code
// has a copy (a subject root such as "embed.jobs" or "embed.dlq." counts)
// that could drift from it.
func TestWireNamesInSchema(t *testing.T) {
	forbidden := map[string]bool{}
	for _, n := range wireNames {
		forbidden[n] = true
		if root, ok := strings.CutSuffix(n, ".>"); ok {
			forbidden[root], forbidden[root+"."] = true, true
		}
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || rel == "schema" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && forbidden[s] {
					t.Errorf("%s: the wire name %q is a literal here; use package schema's constant", fset.Position(lit.Pos()), s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files; the walk missed the module", checked)
	}
}

// TestWireNamesAgree: the provisioning defaults and the producer client's
// defaults are schema's names.
func TestWireNamesAgree(t *testing.T) {
	cfg := jetstream.DefaultConfig()
	for _, c := range []struct{ got, want string }{
		{cfg.Jobs.Name, schema.StreamJobs}, {cfg.Jobs.Subjects[0], schema.SubjectJobs},
		{cfg.Results.Name, schema.StreamResults}, {cfg.Results.Subjects[0], schema.SubjectResults},
		{cfg.DLQ.Name, schema.StreamDLQ}, {cfg.DLQ.Subjects[0], schema.SubjectDLQ},
		{cfg.Consumer.Name, schema.ConsumerName}, {cfg.Engines.Name, schema.BucketEngines}, {cfg.Blobs.Name, schema.BucketBlobs},
		{client.DefaultEndpoint, schema.SubjectEmbed}, {client.DefaultRerankEndpoint, schema.SubjectRerank},
		{client.DefaultTokenizeEndpoint, schema.SubjectTokenize}, {client.DefaultJobsSubject, schema.SubjectJobs},
		{client.DefaultResultsSubject, schema.SubjectResults}, {client.DefaultResultsStream, schema.StreamResults},
		{client.DefaultBlobsBucket, schema.BucketBlobs},
		{schema.DefaultTenantResultsPrefix + ".>", schema.SubjectResults},
	} {
		if c.got != c.want {
			t.Errorf("%q, want schema's %q", c.got, c.want)
		}
	}
	for _, deny := range []string{schema.SubjectJobs, schema.SubjectDLQ, schema.SubjectService} {
		if !strings.Contains(strings.Join(schema.DefaultReplyDeny(), " "), deny) {
			t.Errorf("the default reply deny list %v misses %s", schema.DefaultReplyDeny(), deny)
		}
	}
	for _, s := range []string{schema.SubjectEmbed, schema.SubjectRerank, schema.SubjectTokenize} {
		if root, _ := strings.CutSuffix(schema.SubjectService, ">"); !strings.HasPrefix(s, root) {
			t.Errorf("endpoint %s is not under %s", s, schema.SubjectService)
		}
	}
}
