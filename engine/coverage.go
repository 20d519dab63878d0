package engine

import (
	"slices"
	"sync"
)

// Coverage is the set of warmed shapes the JIT guard consults. The engine
// raises it when it runs a shape, warm-up and the fleet's pre-warms
// ([Engine.WarmShape]) included.
type Coverage interface {
	// Warmed reports whether the exact shape ran before.
	Warmed(batch, seq int) bool
	// Ceiling is the longest warmed sequence length (0 when none).
	Ceiling() int
	// Raise records a warmed shape.
	Raise(batch, seq int)
}

// NewCoverage returns an empty in-memory [Coverage], safe for concurrent use.
func NewCoverage() *ShapeSet { return &ShapeSet{shapes: map[Shape]struct{}{}} }

// ShapeSet is the in-memory [Coverage].
type ShapeSet struct {
	mu      sync.RWMutex
	shapes  map[Shape]struct{}
	ceiling int
}

// Warmed implements [Coverage].
func (s *ShapeSet) Warmed(batch, seq int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.shapes[Shape{batch, seq}]
	return ok
}

// Ceiling implements [Coverage].
func (s *ShapeSet) Ceiling() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ceiling
}

// Raise implements [Coverage].
func (s *ShapeSet) Raise(batch, seq int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shapes[Shape{batch, seq}] = struct{}{}
	s.ceiling = max(s.ceiling, seq)
}

// Shapes lists the warmed shapes, by seq then batch.
func (s *ShapeSet) Shapes() []Shape {
	s.mu.RLock()
	out := make([]Shape, 0, len(s.shapes))
	for sh := range s.shapes {
		out = append(out, sh)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Shape) int {
		if a.Seq != b.Seq {
			return a.Seq - b.Seq
		}
		return a.Batch - b.Batch
	})
	return out
}
