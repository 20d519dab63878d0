//go:build cgo

package ort

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
)

// TestRunCancelled cancels a long run (thousands of graph nodes, seconds of
// work) shortly after it starts: ONNX Runtime's terminate flag must stop it
// with the context's error, and the session must stay usable.
func TestRunCancelled(t *testing.T) {
	initORT(t)
	s := modeltest.Tiny
	s.Hidden, s.Layers = 64, 2000
	dir := t.TempDir()
	must(t, modeltest.Write(dir, s))
	m, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	sess, err := Open(m, Provider{IntraOpThreads: 1})
	must(t, err)
	defer sess.Close()

	ctx, cancel := context.WithCancel(context.Background())
	// Cancel once the run is under way; a cancel before Run would be
	// caught by the up-front ctx check instead.
	timer := time.AfterFunc(50*time.Millisecond, cancel)
	defer timer.Stop()
	_, err = sess.Run(ctx, input(8, 2048, fullLens(Shape{8, 2048})))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: err = %v, want context.Canceled", err)
	}
	t.Logf("cancelled run: %v", err)

	// The terminate flag is per session; the next run must clear it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	out, err := sess.Run(ctx2, input(1, 2, []int{2}))
	if err != nil || len(out.Hidden) != 2*s.Hidden {
		t.Fatalf("run after a cancelled one: %d values, %v", len(out.Hidden), err)
	}
}
