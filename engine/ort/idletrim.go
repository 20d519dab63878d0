package ort

import (
	"sync"
	"time"

	"github.com/jetembed/jetembed/engine/ort/internal/ctrim"
)

// IdleTrimAfter is how long CPU sessions must all have been idle before
// the C heap's free memory is returned to the kernel. A run on the CPU
// provider allocates its attention tensors with the C allocator; jetembed
// tells glibc to keep freed memory for the next run (faulting fresh pages
// in every run cost ~12% of the CPU time on long texts), so once the work
// stops the process trims what the last runs left.
const IdleTrimAfter = time.Second

// idleTrim counts the CPU runs in progress and trims the heap once none
// has run for IdleTrimAfter.
type idleTrim struct {
	mu      sync.Mutex
	running int
	gen     uint64 // runs begun; a trim scheduled at gen g is stale after another
	after   time.Duration
	trim    func() bool
}

var cpuRuns = &idleTrim{after: IdleTrimAfter, trim: ctrim.Trim}

func (t *idleTrim) begin() {
	t.mu.Lock()
	t.running++
	t.gen++
	t.mu.Unlock()
}

func (t *idleTrim) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.running > 0 {
		return
	}
	g := t.gen
	time.AfterFunc(t.after, func() {
		t.mu.Lock()
		stale := t.running > 0 || t.gen != g
		t.mu.Unlock()
		// Outside the lock: a trim walks the heap, and a run that begins
		// meanwhile is safe (only free memory is released).
		if !stale {
			t.trim()
		}
	})
}
