package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// obj is one decoded YAML or JSON document.
type obj = map[string]any

// loadYAML decodes every document of a YAML file.
func loadYAML(t *testing.T, path string) []obj {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []obj
	for {
		var d obj
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// get walks a path of map keys and list indexes ("spec", "containers", 0).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

// TestEveryFileParses decodes every YAML and JSON file under deploy/, so a
// stray tab or a missing comma fails here rather than in kubectl.
func TestEveryFileParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			if len(loadYAML(t, path)) == 0 {
				t.Errorf("%s: no documents", path)
			}
			n++
		case ".json":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("parsed only %d files; deploy/ lost some", n)
	}
}

// k8s loads every manifest listed in the kustomization, checking that the
// list and the directory agree and that each object is well formed.
func k8s(t *testing.T) map[string]obj {
	t.Helper()
	kust := loadYAML(t, "k8s/kustomization.yaml")[0]
	if str(kust, "kind") != "Kustomization" {
		t.Fatalf("kustomization kind %q", str(kust, "kind"))
	}
	var listed []string
	objs := map[string]obj{} // "Kind/name"
	for _, r := range list(kust, "resources") {
		name := r.(string)
		listed = append(listed, name)
		for _, d := range loadYAML(t, filepath.Join("k8s", name)) {
			kind, name := str(d, "kind"), str(d, "metadata", "name")
			if str(d, "apiVersion") == "" || kind == "" || name == "" {
				t.Errorf("%s: object without apiVersion, kind or metadata.name: %v", r, d)
				continue
			}
			objs[kind+"/"+name] = d
		}
	}
	files, _ := filepath.Glob("k8s/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(listed, b) {
			t.Errorf("k8s/%s is not listed in kustomization.yaml", b)
		}
	}
	return objs
}

func mustObj(t *testing.T, objs map[string]obj, key string) obj {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s in deploy/k8s", key)
	}
	return o
}

func TestDeployment(t *testing.T) {
	objs := k8s(t)
	dep := mustObj(t, objs, "Deployment/jetembed")
	cm := mustObj(t, objs, "ConfigMap/jetembed")
	pod := get(dep, "spec", "template")
	podLabels, _ := get(pod, "metadata", "labels").(obj)

	for _, k := range []string{"JETEMBED_NATS", "JETEMBED_MODEL", "JETEMBED_PROVIDER", "JETEMBED_HTTP"} {
		if str(cm, "data", k) == "" {
			t.Errorf("ConfigMap lacks %s", k)
		}
	}
	httpAddr := str(cm, "data", "JETEMBED_HTTP")
	if !strings.HasPrefix(httpAddr, "0.0.0.0:") {
		t.Errorf("JETEMBED_HTTP=%q: probes reach the pod IP, so it must listen on 0.0.0.0", httpAddr)
	}
	httpPort, _ := strconv.Atoi(httpAddr[strings.LastIndex(httpAddr, ":")+1:])

	main := get(pod, "spec", "containers", 0)
	if got := fmt.Sprint(list(main, "args")); got != "[serve]" {
		t.Errorf("consumer args %s, want [serve]", got)
	}
	var port int
	for _, p := range list(main, "ports") {
		if str(p, "name") == "http" {
			port = get(p, "containerPort").(int)
		}
	}
	if port == 0 || port != httpPort {
		t.Errorf("container port http = %d, JETEMBED_HTTP port = %d", port, httpPort)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := str(main, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %q, want %q", probe, got, path)
		}
		if p := get(main, probe, "httpGet", "port"); p != "http" && p != httpPort {
			t.Errorf("%s port %v, want http (%d)", probe, p, httpPort)
		}
	}

	inits := list(pod, "spec", "initContainers")
	if len(inits) != 1 || fmt.Sprint(list(inits[0], "args")) != "[warmup]" {
		t.Fatalf("init containers %v, want one running warmup", inits)
	}
	volumes := map[string]any{}
	for _, v := range list(pod, "spec", "volumes") {
		volumes[str(v, "name")] = v
	}
	for _, c := range []any{main, inits[0]} {
		name := str(c, "name")
		for _, section := range []string{"requests", "limits"} {
			if g := get(c, "resources", section, "nvidia.com/gpu"); g != 1 {
				t.Errorf("%s: resources.%s nvidia.com/gpu = %v, want 1 (one process per GPU)", name, section, g)
			}
		}
		if str(c, "image") != str(main, "image") {
			t.Errorf("%s runs image %q, the consumer %q: warm-up must match", name, str(c, "image"), str(main, "image"))
		}
		if ref := str(c, "envFrom", 0, "configMapRef", "name"); ref != "jetembed" {
			t.Errorf("%s: envFrom ConfigMap %q, want jetembed", name, ref)
		}
		for _, m := range list(c, "volumeMounts") {
			if _, ok := volumes[str(m, "name")]; !ok {
				t.Errorf("%s mounts undefined volume %q", name, str(m, "name"))
			}
			if str(m, "name") == "trt-cache" && str(m, "mountPath") != str(cm, "data", "JETEMBED_TRT_CACHE") {
				t.Errorf("%s mounts the engine cache at %q, JETEMBED_TRT_CACHE is %q", name, str(m, "mountPath"), str(cm, "data", "JETEMBED_TRT_CACHE"))
			}
		}
	}
	// The init container records what it warmed in EMBED_ENGINES
	// (JETEMBED_NATS is in the ConfigMap): it logs in and trusts the CA as
	// the consumer does.
	if str(cm, "data", "JETEMBED_NATS") != "" {
		var password bool
		for _, e := range list(inits[0], "env") {
			password = password || str(e, "name") == "JETEMBED_NATS_PASSWORD"
		}
		var ca bool
		for _, m := range list(inits[0], "volumeMounts") {
			ca = ca || str(m, "mountPath") == filepath.Dir(str(cm, "data", "JETEMBED_NATS_TLS_CA"))
		}
		if !password || !ca {
			t.Errorf("warmup init container: NATS password %v, CA mounted %v; it publishes to the fleet and needs both", password, ca)
		}
	}
	for name, v := range volumes {
		claim := str(v, "persistentVolumeClaim", "claimName")
		if claim == "" {
			continue
		}
		pvc := mustObj(t, objs, "PersistentVolumeClaim/"+claim)
		if name == "trt-cache" && fmt.Sprint(list(pvc, "spec", "accessModes")) != "[ReadWriteMany]" {
			t.Errorf("engine cache PVC access modes %v, want [ReadWriteMany] (shared by the fleet)", list(pvc, "spec", "accessModes"))
		}
	}

	pdb := mustObj(t, objs, "PodDisruptionBudget/jetembed")
	svc := mustObj(t, objs, "Service/jetembed-metrics")
	for what, sel := range map[string]any{
		"Deployment selector": get(dep, "spec", "selector", "matchLabels"),
		"PDB selector":        get(pdb, "spec", "selector", "matchLabels"),
		"Service selector":    get(svc, "spec", "selector"),
	} {
		m, _ := sel.(obj)
		if len(m) == 0 {
			t.Errorf("%s is empty", what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s %s=%v does not match the pod labels %v", what, k, v, podLabels)
			}
		}
	}
	if tp := get(svc, "spec", "ports", 0, "targetPort"); tp != "http" && tp != httpPort {
		t.Errorf("metrics Service targets port %v", tp)
	}
}

func TestKEDAScaledObject(t *testing.T) {
	so := loadYAML(t, "keda/scaledobject.yaml")[0]
	if str(so, "apiVersion") != "keda.sh/v1alpha1" || str(so, "kind") != "ScaledObject" {
		t.Fatalf("%s/%s, want keda.sh/v1alpha1 ScaledObject", str(so, "apiVersion"), str(so, "kind"))
	}
	dep := mustObj(t, k8s(t), "Deployment/jetembed")
	if str(so, "spec", "scaleTargetRef", "name") != str(dep, "metadata", "name") || str(so, "spec", "scaleTargetRef", "kind") != "Deployment" {
		t.Errorf("scaleTargetRef %v does not name the Deployment", get(so, "spec", "scaleTargetRef"))
	}
	kust := loadYAML(t, "k8s/kustomization.yaml")[0]
	if str(so, "metadata", "namespace") != str(kust, "namespace") {
		t.Errorf("ScaledObject namespace %q, Deployment namespace %q", str(so, "metadata", "namespace"), str(kust, "namespace"))
	}
	if min, _ := get(so, "spec", "minReplicaCount").(int); min < 1 {
		t.Errorf("minReplicaCount %d: request-reply traffic has no backlog to wake a fleet at zero", min)
	}
	trig := list(so, "spec", "triggers")
	if len(trig) != 1 || str(trig[0], "type") != "metrics-api" {
		t.Fatalf("triggers %v, want one metrics-api (per-tenant consumers: no one consumer's lag is the backlog)", trig)
	}
	md := get(trig[0], "metadata")
	if f := str(md, "format"); f != "" && f != "json" {
		t.Errorf("trigger format %q, want json (its valueLocation is GJSON)", f)
	}
	u, err := url.Parse(str(md, "url"))
	if err != nil {
		t.Fatalf("trigger url: %v", err)
	}
	q := u.Query()
	if u.Path != "/jsz" || q.Get("acc") != "EMBED" || q.Get("streams") != "true" {
		t.Errorf("trigger url %q, want /jsz?acc=EMBED&streams=true (the account of nats/accounts.conf that holds the streams)", u)
	}
	// The path is read against a live server in TestDeployTopology; here,
	// that it names the work queue of the provision Job's config.
	loc := str(md, "valueLocation")
	for _, w := range []string{`#(name=="EMBED")`, `#(name=="EMBED_JOBS")`, "state.messages"} {
		if !strings.Contains(loc, w) {
			t.Errorf("valueLocation %q does not hold %s", loc, w)
		}
	}
	for _, k := range []string{"targetValue", "activationTargetValue"} {
		if n, err := strconv.ParseFloat(str(md, k), 64); err != nil || n < 0 || (k == "targetValue" && n <= 0) {
			t.Errorf("%s %q must be a positive number string", k, str(md, k))
		}
	}
	job := mustObj(t, k8s(t), "Job/jetembed-provision")
	if args := fmt.Sprint(list(get(job, "spec", "template", "spec", "containers", 0), "args")); !strings.Contains(args, "--per-tenant") {
		t.Errorf("the provision Job's args %s make one consumer of every job: a tenant's backlog is pulled ahead of another's", args)
	}
	values := loadYAML(t, "nats/values.yaml")[0]
	if port := get(values, "config", "monitor", "port"); u.Port() != fmt.Sprint(port) {
		t.Errorf("KEDA reads %q, the NATS monitor listens on port %v", u, port)
	}
}

func TestNATSValues(t *testing.T) {
	v := loadYAML(t, "nats/values.yaml")[0]
	checks := []struct {
		path []any
		want any
	}{
		{[]any{"config", "cluster", "enabled"}, true},
		{[]any{"config", "cluster", "replicas"}, 3},
		{[]any{"config", "cluster", "tls", "enabled"}, true},
		{[]any{"config", "nats", "tls", "enabled"}, true},
		{[]any{"config", "jetstream", "enabled"}, true},
		{[]any{"config", "jetstream", "fileStore", "enabled"}, true},
		{[]any{"config", "jetstream", "fileStore", "pvc", "enabled"}, true},
		{[]any{"config", "monitor", "enabled"}, true},
		{[]any{"tlsCA", "enabled"}, true},
	}
	for _, c := range checks {
		if got := get(v, c.path...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
	// Every password accounts.conf asks for is given to the server.
	env, _ := get(v, "container", "env").(obj)
	for _, name := range accountVariables(t) {
		if _, ok := env[name]; !ok {
			t.Errorf("accounts.conf uses $%s but the chart values do not set it", name)
		}
	}
}
