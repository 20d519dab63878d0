package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// fs.String("name", ...) and fs.StringVar(&v, "name", ...), of every kind.
	flagDef = regexp.MustCompile(`fs\.(?:AutoBool|String|Int|Int64|Uint|Bool|Duration|Float64)(?:\(|Var\(\s*[^,()]+,)\s*"([a-z0-9-]+)"`)
	envRef  = regexp.MustCompile(`JETEMBED_[A-Z][A-Z0-9_]*`)
)

// TestEnvNamesAreFlags checks that every JETEMBED_* variable the deployment
// files set is the environment name of a flag of cmd/jetembed. A variable
// that backs no flag is silently ignored by the binary, so a typo or a
// renamed flag would otherwise go unnoticed until production.
func TestEnvNamesAreFlags(t *testing.T) {
	sources, err := filepath.Glob("../cmd/jetembed/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var envs []string
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range flagDef.FindAllStringSubmatch(readFile(t, f), -1) {
			envs = append(envs, "JETEMBED_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")))
		}
	}
	// The flag parsing reads the same names (cmd/jetembed/flags.go envName);
	// fewer than a handful found means this scan is broken, not the files.
	if len(envs) < 10 {
		t.Fatalf("found only %d flags in cmd/jetembed; the scan no longer matches how flags are defined", len(envs))
	}
	files := []string{"../Dockerfile", "../Dockerfile.cuda", "compose/docker-compose.yaml"}
	k8sFiles, _ := filepath.Glob("k8s/*.yaml")
	files = append(files, k8sFiles...)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range envRef.FindAllString(string(data), -1) {
			seen++
			if !slices.Contains(envs, v) {
				t.Errorf("%s sets %s, which backs no flag of cmd/jetembed", f, v)
			}
		}
	}
	if seen == 0 {
		t.Error("no JETEMBED_* variable found in the deployment files")
	}
}
