package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
)

func TestCompose(t *testing.T) {
	c := loadYAML(t, "compose/docker-compose.yaml")[0]
	services, _ := get(c, "services").(obj)
	var nats, consumers []string
	for name, s := range services {
		switch img := str(s, "image"); {
		case strings.HasPrefix(img, "nats:"):
			nats = append(nats, name)
		case str(s, "command", 0) == "serve":
			consumers = append(consumers, name)
		}
	}
	slices.Sort(nats)
	if len(nats) != 3 || len(consumers) != 2 {
		t.Fatalf("compose has NATS servers %v and consumers %v, want 3 and 2", nats, consumers)
	}
	for _, name := range consumers {
		s := services[name]
		if str(s, "build", "dockerfile") != "Dockerfile" {
			t.Errorf("%s does not build the CPU Dockerfile", name)
		}
		if p := str(s, "environment", "JETEMBED_PROVIDER"); p != "cpu" {
			t.Errorf("%s provider %q, want cpu", name, p)
		}
		if u, p := str(s, "environment", "JETEMBED_NATS_USER"), str(s, "environment", "JETEMBED_PROVISION"); u != "embedder" || p != "off" {
			t.Errorf("%s runs as %q with JETEMBED_PROVISION=%q, want embedder and off (provision owns the objects)", name, u, p)
		}
		urls := str(s, "environment", "JETEMBED_NATS")
		for _, n := range nats {
			if !strings.Contains(urls, "nats://"+n+":4222") {
				t.Errorf("%s JETEMBED_NATS=%q lacks %s", name, urls, n)
			}
		}
	}
	for _, n := range nats {
		for _, v := range accountVariables(t) {
			if str(services[n], "environment", v) == "" {
				t.Errorf("compose %s does not set $%s, which accounts.conf uses", n, v)
			}
		}
	}
	if u := str(services["provision"], "environment", "JETEMBED_NATS_USER"); u != "provisioner" {
		t.Errorf("compose provisions as %q, want provisioner", u)
	}
	// The servers load compose/nats.conf with accounts.conf mounted beside
	// it, and the passwords from the environment.
	setPasswords(t)
	t.Setenv("NATS_NAME", "nats-1")
	dir := t.TempDir()
	for src, dst := range map[string]string{"compose/nats.conf": "nats.conf", "nats/accounts.conf": "accounts.conf"} {
		if err := os.WriteFile(filepath.Join(dir, dst), []byte(readFile(t, src)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("compose/nats.conf: %v", err)
	}
	if len(opts.Users) < 4 {
		t.Errorf("compose/nats.conf has %d users: accounts.conf is not included", len(opts.Users))
	}
	checkStoreCaps(t, services, consumers, opts.JetStreamMaxStore)
	conf := readFile(t, "compose/nats.conf")
	for _, n := range nats {
		if !strings.Contains(conf, "nats://"+n+":6222") {
			t.Errorf("compose/nats.conf routes lack %s", n)
		}
	}
}

// checkStoreCaps: the byte caps provision sets (its defaults where the
// compose file sets none) fit the servers' max_file_store, against which
// nats-server reserves every cap (a replica of each on each server); and
// the consumers, which check the objects at start, say the same caps.
func checkStoreCaps(t *testing.T, services obj, consumers []string, store int64) {
	t.Helper()
	d := jetstream.DefaultConfig()
	var err error
	caps := []struct {
		env string
		def int64
	}{
		{"JETEMBED_JOBS_MAX_BYTES", d.Jobs.MaxBytes},
		{"JETEMBED_RESULTS_MAX_BYTES", d.Results.MaxBytes},
		{"JETEMBED_DLQ_MAX_BYTES", d.DLQ.MaxBytes},
		{"JETEMBED_BLOBS_MAX_BYTES", d.Blobs.MaxBytes},
		{"JETEMBED_USAGE_MAX_BYTES", d.Usage.MaxBytes},
		{"JETEMBED_CACHE_MAX_BYTES", d.Cache.MaxBytes},
	}
	var sum int64
	for _, c := range caps {
		v := c.def
		if s := str(services["provision"], "environment", c.env); s != "" {
			if v, err = strconv.ParseInt(s, 10, 64); err != nil {
				t.Fatalf("compose provision %s=%q: %v", c.env, s, err)
			}
		}
		if v <= 0 {
			t.Errorf("compose provisions %s without a cap (%d)", c.env, v)
		}
		sum += v
		for _, name := range consumers {
			if got := str(services[name], "environment", c.env); got != str(services["provision"], "environment", c.env) {
				t.Errorf("%s says %s=%q, provision %q", name, c.env, got, str(services["provision"], "environment", c.env))
			}
		}
	}
	if store <= 0 || sum > store {
		t.Errorf("the compose file's caps reserve %d bytes, over the servers' max_file_store of %d", sum, store)
	}
}

var metricRef = regexp.MustCompile(`\bjetembed_[a-z_]+`)

// TestGrafanaMetrics checks that the dashboard queries only metrics the
// process exposes, and shows each of them somewhere.
func TestGrafanaMetrics(t *testing.T) {
	var dash obj
	if err := json.Unmarshal([]byte(readFile(t, "grafana/jetembed.json")), &dash); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case obj:
			if e, ok := x["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(dash["panels"])
	if len(exprs) < 10 {
		t.Fatalf("dashboard has %d queries", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		refs := metricRef.FindAllString(e, -1)
		if len(refs) == 0 {
			t.Errorf("query %q uses no jetembed metric", e)
		}
		for _, r := range refs {
			base := r
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(r, suffix); ok && slices.Contains(telemetry.MetricNames, b) {
					base = b
				}
			}
			if !slices.Contains(telemetry.MetricNames, base) {
				t.Errorf("query %q uses %s, which jetembed does not expose", e, r)
			}
			used[base] = true
		}
	}
	for _, m := range telemetry.MetricNames {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
