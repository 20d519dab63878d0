package jetstream

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/jetembed/jetembed/schema"
)

// TestRerankResultNeverNonFinite: a text whose score is not a finite
// number (a vector of the model's that is not) gets an error of its own,
// never a score that JSON cannot carry; the others keep theirs.
func TestRerankResultNeverNonFinite(t *testing.T) {
	q := schema.Item{Dense: schema.Vector{1, 0}}
	res := &schema.Result{V: 1, ID: "r", Items: []schema.Item{q,
		{Dense: schema.Vector{float32(math.NaN()), 0}},
		{Dense: schema.Vector{0.5, 0.5}},
		{Dense: schema.Vector{float32(math.Inf(1)), 0}},
	}}
	out := rerankResult(res, 3, schema.DefaultRerankWeights)
	if out.Error != nil || len(out.Scores) != 3 || out.Scores[0].Error == nil || out.Scores[2].Error == nil ||
		out.Scores[1].Error != nil || out.Scores[1].Score != 0.2 {
		t.Fatalf("%+v", out)
	}
	if _, err := json.Marshal(out); err != nil {
		t.Errorf("the answer does not encode as JSON: %v", err)
	}
}
