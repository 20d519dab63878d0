package fleet

import (
	"context"
	"iter"
	"testing"
)

type idleEngine struct{}

func (idleEngine) WarmShape(context.Context, int, int) error { return nil }
func (idleEngine) ShapeWarmed(int, int) bool                 { return false }
func (idleEngine) WarmedShapes() iter.Seq2[int, int]         { return func(func(int, int) bool) {} }
func (idleEngine) Activity() (bool, int64)                   { return true, 0 }
func (idleEngine) ShapeAdmissible(int, int) error            { return nil }

// TestApplyPutDeleteCycleBoundsPrewarmQueue: a peer (or anyone who may
// write the bucket) putting and deleting one shape key over and over while
// the engine is busy (so nothing drains the queue) must not grow the
// pre-warm queue without bound.
func TestApplyPutDeleteCycleBoundsPrewarmQueue(t *testing.T) {
	cfg := Config{Model: "m@000000000000", SM: "cpu"}
	f := &Member{
		cfg: cfg, eng: idleEngine{}, kick: make(chan struct{}, 1),
		shapes: map[shape]ShapeRecord{}, wanted: map[shape]bool{}, locked: map[shape]bool{},
		changed: make(chan struct{}), tried: map[shape]bool{},
	}
	key := cfg.key(2, 128).String()
	val := encodeRecord(ShapeRecord{By: "peer", Via: ViaRun})
	for range 1000 {
		f.apply(&Entry{Key: key, Value: val, Op: OpPut})
		f.apply(&Entry{Key: key, Op: OpDelete})
	}
	if n := len(f.prewarm); n > 1 {
		t.Fatalf("pre-warm queue holds %d entries for one shape", n)
	}
}
