package ort

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleTrim: the heap is trimmed once, IdleTrimAfter after the last run
// in progress ends; a run that begins within that time (or is still going)
// puts the trim off until it ends.
func TestIdleTrim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var trimmed atomic.Int32
		it := &idleTrim{after: time.Second, trim: func() bool { trimmed.Add(1); return true }}

		it.begin()
		it.begin()
		it.end() // one still running
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := trimmed.Load(); n != 0 {
			t.Fatalf("trimmed %d times while a run was in progress", n)
		}
		it.end()
		time.Sleep(500 * time.Millisecond)
		it.begin() // within the second: the pending trim is stale
		it.end()
		time.Sleep(700 * time.Millisecond) // 1.2 s after the first end, 0.7 s after the second
		synctest.Wait()
		if n := trimmed.Load(); n != 0 {
			t.Fatalf("trimmed %d times less than a second after the last run", n)
		}
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		if n := trimmed.Load(); n != 1 {
			t.Fatalf("trimmed %d times a second after the last run, want 1", n)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := trimmed.Load(); n != 1 {
			t.Fatalf("trimmed %d times with nothing run since, want 1", n)
		}
	})
}
