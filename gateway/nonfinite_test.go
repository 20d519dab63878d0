package gateway

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/schema"
)

type nanFleet struct{}

func (nanFleet) Request(_ context.Context, job *schema.Job) (*schema.Result, error) {
	res := &schema.Result{V: schema.Version, ID: job.ID, Model: "m"}
	for range job.Texts {
		res.Items = append(res.Items, schema.Item{Dense: []float32{float32(math.NaN()), 1}})
	}
	return res, nil
}

// TestNonFiniteVectorIsAnswered: a vector the fleet answered with a NaN
// (a broken model, or a hostile member over msgpack) cannot be written as
// JSON; the call must get an error body, not a 200 with an empty body.
func TestNonFiniteVectorIsAnswered(t *testing.T) {
	s, err := New(Config{Requester: nanFleet{}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/embeddings", strings.NewReader(`{"input":"a"}`))
	s.Handler().ServeHTTP(w, r)
	if w.Code == http.StatusOK || !strings.Contains(w.Body.String(), `"error"`) {
		t.Fatalf("status %d, body %q; want an error answer", w.Code, w.Body.String())
	}
}
