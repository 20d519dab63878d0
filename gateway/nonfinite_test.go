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

type skewFleet struct{}

func (skewFleet) Request(_ context.Context, job *schema.Job) (*schema.Result, error) {
	res := &schema.Result{V: schema.Version, ID: job.ID, Model: "m"}
	for range job.Texts {
		res.Items = append(res.Items, schema.Item{Dense: []float32{1}, Sparse: &schema.Sparse{IDs: []uint32{1, 2, 3}, Weights: schema.Vector{0.5}}})
	}
	return res, nil
}

// TestSkewedSparseIsRefused: a sparse vector with more indices than
// values (a hostile or broken member) is not passed on to the caller.
func TestSkewedSparseIsRefused(t *testing.T) {
	s, err := New(Config{Requester: skewFleet{}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/sparse-embeddings", strings.NewReader(`{"input":"a"}`))
	s.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusBadGateway {
		t.Fatalf("status %d, body %q; want 502", w.Code, w.Body.String())
	}
}
