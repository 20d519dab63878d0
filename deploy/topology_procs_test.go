package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/testkit"
)

// The topology test runs the deploy files as real processes: this file
// builds the binary, turns a container spec of the manifests into a
// command line and an environment, and runs it.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// jetembedBinary builds cmd/jetembed once per test binary into a directory
// removed at the end of the run.
func jetembedBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv("JETEMBED_ORT_LIB") == "" {
		t.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jetembed-deploy-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "jetembed")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/jetembed").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// secretUsers maps the Secrets the manifests read a NATS password from to
// the accounts.conf user whose password they hold.
// The gateway's API key Secret holds the "password" of user gateway-api.
var secretUsers = map[string]string{"jetembed-nats": "embedder", "jetembed-provisioner": "provisioner",
	"jetembed-gateway-nats": "gateway", "jetembed-gateway-api": "gateway-api"}

// containerEnv is the environment Kubernetes gives container c: the
// ConfigMap of its envFrom, then its env entries (values, ConfigMap keys,
// Secret keys), then local, which replaces what cannot be the same on this
// machine. Every local key must be one the manifests set (or the image
// does: JETEMBED_ORT_LIB), so a substitution never adds configuration.
func containerEnv(t *testing.T, c any, cm obj, local map[string]string) map[string]string {
	t.Helper()
	data, _ := get(cm, "data").(obj)
	env := map[string]string{}
	for _, from := range list(c, "envFrom") {
		if ref := str(from, "configMapRef", "name"); ref != str(cm, "metadata", "name") {
			t.Fatalf("envFrom ConfigMap %q: only %q is deployed", ref, str(cm, "metadata", "name"))
		}
		for k, v := range data {
			env[k] = fmt.Sprint(v)
		}
	}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		switch {
		case get(e, "value") != nil:
			env[name] = fmt.Sprint(get(e, "value"))
		case get(e, "valueFrom", "configMapKeyRef") != nil:
			v, ok := data[str(e, "valueFrom", "configMapKeyRef", "key")]
			if !ok {
				t.Fatalf("%s: ConfigMap has no key %q", name, str(e, "valueFrom", "configMapKeyRef", "key"))
			}
			env[name] = fmt.Sprint(v)
		case get(e, "valueFrom", "secretKeyRef") != nil:
			user, ok := secretUsers[str(e, "valueFrom", "secretKeyRef", "name")]
			if !ok {
				t.Fatalf("%s: unknown Secret %q", name, str(e, "valueFrom", "secretKeyRef", "name"))
			}
			env[name] = password(user)
		default:
			t.Fatalf("env %s: no value", name)
		}
	}
	for k, v := range local {
		if _, ok := env[k]; !ok && k != "JETEMBED_ORT_LIB" {
			continue // not this container's: nothing to replace
		}
		env[k] = v
	}
	return env
}

// args returns a container's command line after the entrypoint.
func args(c any) []string {
	var out []string
	for _, a := range list(c, "args") {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// proc is one jetembed process of the topology.
type proc struct {
	name string
	*testkit.Proc
}

// start runs bin with args and exactly env (plus PATH, HOME and TMPDIR),
// and stops it with SIGTERM at cleanup.
func start(t *testing.T, name, bin string, args []string, env map[string]string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	p := &proc{name: name, Proc: testkit.StartProc(t, cmd)}
	t.Cleanup(func() {
		p.Stop(20 * time.Second)
		if t.Failed() {
			t.Logf("%s %s log:\n%s", p.name, strings.Join(args, " "), testkit.Tail(p.Log.String(), 60))
		}
	})
	return p
}

// run starts the process and waits for it to exit, failing the test on a
// non-zero status.
func run(t *testing.T, name, bin string, args []string, env map[string]string) string {
	t.Helper()
	p := start(t, name, bin, args, env)
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not finish", name)
	}
	if p.Err() != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, p.Err(), p.Log.String())
	}
	return p.Log.String()
}
