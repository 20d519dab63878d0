package jetstream

// TenantsReady reports whether each of tenants has a delivery before the
// per-tenant pulling's fair gate: one waiting in it, or, for the tenant
// whose delivery is in hand, more buffered (its loop submits the next the
// moment this one returns, and the gate holds the turn for it). A test
// that steps jobs one at a time steps only then, so that the gate always
// has the choice it is tested on: a pull request late on a loaded
// machine, or a fetch loop not yet scheduled, would otherwise look like a
// tenant with nothing to do.
func (w *Worker) TenantsReady(tenants ...string) bool {
	if w.tenants == nil {
		return false
	}
	g := w.tenants.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range tenants {
		if len(g.waiting[t]) > 0 {
			continue
		}
		if more := g.more[t]; g.busy && g.hand == t && more != nil && more.has() {
			continue
		}
		return false
	}
	return true
}

// SetUsageFetchBytes sets ReadUsage's byte bound of one pull, for a test
// of a record over it; it returns the old value.
func SetUsageFetchBytes(n int) int {
	old := usageFetchBytes
	usageFetchBytes = n
	return old
}
