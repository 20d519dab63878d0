package deploy

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a Kubernetes API type. Decoding a manifest
// strictly into it rejects unknown and misspelt fields (a "readinesProbe"
// that kubectl apply --validate=false would silently drop) and wrong value
// types, which is the schema check possible without downloading the
// OpenAPI schemas: the API types are the schema's source.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim":               func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                           func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

func TestManifestsStrictSchema(t *testing.T) {
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		data := readFile(t, f)
		for i, doc := range splitDocs(data) {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			if meta.APIVersion == "kustomize.config.k8s.io/v1beta1" {
				continue
			}
			mk, ok := kinds[meta.APIVersion+"/"+meta.Kind]
			if !ok {
				t.Errorf("%s #%d: %s %s has no API type here; add it to kinds", f, i, meta.APIVersion, meta.Kind)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), mk()); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, meta.Kind, err)
			}
			checked++
		}
	}
	if checked < 6 {
		t.Errorf("checked %d objects, want at least 6", checked)
	}
}

// TestStrictSchemaCatchesTypos makes sure the strict decoding above is
// strict: a misspelt probe field and a string where a number goes fail.
func TestStrictSchemaCatchesTypos(t *testing.T) {
	good := readFile(t, "k8s/deployment.yaml")
	for name, bad := range map[string]string{
		"misspelt field": strings.Replace(good, "readinessProbe:", "readinesProbe:", 1),
		"wrong type":     strings.Replace(good, "containerPort: 9090", "containerPort: http", 1),
	} {
		if bad == good {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		if err := yaml.UnmarshalStrict([]byte(bad), &appsv1.Deployment{}); err == nil {
			t.Errorf("%s: strict decoding accepted it", name)
		}
	}
}

// splitDocs splits a multi-document YAML file on its --- lines.
func splitDocs(data string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+data, "\n---") {
		if len(bytes.TrimSpace([]byte(stripComments(d)))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
