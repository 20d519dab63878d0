package jetstream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/schema"
)

// takeSink takes every delivery and settles none.
type takeSink struct{ got []consumer.Delivery }

func (s *takeSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.got = append(s.got, d)
	return nil
}

// TestQuotaChargesLocalRequests: a request made inside the process (the
// HTTP API of serve: its job already decoded, no Data) is charged its
// texts' bytes as a request over NATS is charged its body's, not one token
// whatever its size, so the HTTP API's tenant stays within AnyTenant's
// quota.
func TestQuotaChargesLocalRequests(t *testing.T) {
	shares := Shares{Quotas: map[string]Quota{AnyTenant: {TokensPerMinute: 600}}}
	q := newQuotas(shares, func() time.Time { return time.Unix(1000, 0) }) // the clock stands still
	sink := quotaSink{Sink: &takeSink{}, q: q}
	text := strings.Repeat("x", 4000) // about 1000 tokens, above the minute's 600
	if err := sink.Submit(context.Background(), &consumer.Request{Local: true, Job: &schema.Job{V: schema.Version, ID: "big", Texts: []string{text}}}); err != nil {
		t.Fatal(err)
	}
	r := &consumer.Request{Local: true, Job: &schema.Job{V: schema.Version, ID: "next", Texts: []string{"hi"}}}
	if err := sink.Submit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.Refusal == nil || r.Refusal.Code != schema.CodeQuotaExceeded {
		q.mu.Lock()
		bucket := q.state[""].bucket
		q.mu.Unlock()
		t.Fatalf("a request after one of 4000 bytes against 600 tokens a minute: refusal %v, want quota_exceeded (the tenant's bucket is at %.0f)", r.Refusal, bucket)
	}
}

// TestQuotaStateBounded: tenants minted a request each (anyone may
// publish where there is no auth), each charged more than a minute's
// worth so that none is at rest, do not grow the quota state past
// maxQuotaTenants: beyond it the tenants the shares do not name share one
// state (the tenants minted together are held back together), a named
// tenant keeps its own, and the state of a minted tenant's charge is the
// one its release gives back to.
func TestQuotaStateBounded(t *testing.T) {
	shares := Shares{Quotas: map[string]Quota{AnyTenant: {TokensPerMinute: 600}, "named": {TokensPerMinute: 600}}}
	q := newQuotas(shares, func() time.Time { return time.Unix(1000, 0) })
	var releases []func()
	for i := range maxQuotaTenants + 500 {
		release, wait := q.take(fmt.Sprintf("minted%d", i), 1000)
		if wait == 0 {
			releases = append(releases, release)
		}
	}
	q.mu.Lock()
	n := len(q.state)
	q.mu.Unlock()
	if n > maxQuotaTenants+1 {
		t.Fatalf("%d tenants minted with a charge each keep %d states, want at most %d", maxQuotaTenants+500, n, maxQuotaTenants+1)
	}
	if _, wait := q.take("minted-late", 1); wait == 0 {
		t.Errorf("a tenant minted beyond the bound was let in: it shares the held-back state")
	}
	if _, wait := q.take("named", 1); wait != 0 {
		t.Errorf("the named tenant waits %v beyond the bound, want its own state", wait)
	}
	for _, r := range releases {
		r()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for name, st := range q.state {
		if name != "named" && st.inFlight != 0 {
			t.Errorf("%q: %d tokens in flight after every release", name, st.inFlight)
		}
	}
}
