package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// outputKeys are the only keys an output line may have (docs/commands.md,
// "Output lines").
var outputKeys = []string{"id", "model", "dense", "sparse", "colbert", "tokens", "truncated", "error"}

// checkOutputLines holds every line of out to the documented output line
// format: ids in order (ids[i] for line i), a model on every line with
// vectors, a sparse vector always {ids, weights} arrays (never null), an
// error always {code, message}.
func checkOutputLines(t *testing.T, out string, ids []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), len(ids), out)
	}
	for i, line := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		for k := range m {
			if !slices.Contains(outputKeys, k) {
				t.Errorf("line %d: unknown key %q", i+1, k)
			}
		}
		var id string
		if err := json.Unmarshal(m["id"], &id); err != nil || id != ids[i] {
			t.Errorf("line %d: id %s, want %q", i+1, m["id"], ids[i])
		}
		if raw, ok := m["error"]; ok {
			var e map[string]any
			if json.Unmarshal(raw, &e) != nil || e["code"] == nil || e["message"] == nil {
				t.Errorf("line %d: error %s, want {code, message}", i+1, raw)
			}
			continue
		}
		if _, ok := m["model"]; !ok {
			t.Errorf("line %d has vectors and no model: %s", i+1, line)
		}
		if raw, ok := m["sparse"]; ok {
			var sp struct {
				IDs     *[]uint32  `json:"ids"`
				Weights *[]float32 `json:"weights"`
			}
			if json.Unmarshal(raw, &sp) != nil || sp.IDs == nil || sp.Weights == nil {
				t.Errorf("line %d: sparse %s, want {ids: [...], weights: [...]}", i+1, raw)
			}
		}
	}
}
