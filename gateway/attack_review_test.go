package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/gateway"
)

// TestAttackDeclaredLengthHoldsBodyBudget: the body budget is reserved for
// the Content-Length a call declares, and the body's deadline is sized to
// that length, before a byte of it came. One client address, within its
// share of calls in progress (ClientConcurrent, 32 at defaults), declares
// 32 bodies of 8 MiB (the largest allowed), sends none of them and so
// holds the whole 256 MiB budget for HeaderTimeout + 8 MiB at MinBodyRate,
// about 87 s: every other client's call is answered 429 gateway_busy
// meanwhile, at defaults and with no API key. Issue 24's reproduction 3
// (slow bodies hold the slots) again, through the body budget: another
// client's call must not be refused because one client declared large
// bodies it does not send.
func TestAttackDeclaredLengthHoldsBodyBudget(t *testing.T) {
	r := newRig(t, true, nil)
	addr := strings.TrimPrefix(r.url, "http://")
	stop := make(chan struct{})
	defer close(stop)
	n := int(gateway.DefaultBodyBudget / gateway.DefaultMaxBodyBytes)
	for range n {
		c := dialFrom(t, "127.0.0.2", addr)
		// Reserves Content-Length + 1 bytes: 32 x 8 MiB, the budget.
		fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, gateway.DefaultMaxBodyBytes-1)
	}
	time.Sleep(500 * time.Millisecond) // every declared body is being read
	for i, wait := range []time.Duration{0, 6 * time.Second} {
		time.Sleep(wait) // past HeaderTimeout too
		a := r.post(t, "/v1/embeddings", `{"input":"a legitimate call"}`)
		if a.status != 200 {
			t.Errorf("call %d of another client while one client declared %d bodies of 8 MiB and sent none: %d %s", i, n, a.status, a.body)
		}
	}
}

// TestAttackRerankHugeWeights: weights are checked to be finite and not
// negative, but not bounded: 1e308 each makes every score +Inf, which
// JSON cannot carry, and the caller's own bad parameter is answered
// 502 fleet_error (a fault of the fleet, in the metrics and alerts) on
// both rerank routes; on NATS, a JSON request gets "internal". A weight
// that cannot give a finite score is a bad request: 400 invalid_weights.
func TestAttackRerankHugeWeights(t *testing.T) {
	r := newRig(t, true, nil)
	for _, c := range []struct{ path, body string }{
		{"/rerank", `{"query":"q","texts":["a","b"],"weights":{"dense":1e308,"sparse":1e308,"colbert":1e308}}`},
		{"/v1/rerank", `{"query":"q","documents":["a","b"],"weights":{"dense":1e308,"sparse":1e308,"colbert":1e308}}`},
	} {
		a := r.post(t, c.path, c.body)
		if a.status != 400 {
			t.Errorf("%s with weights of 1e308: %d %s", c.path, a.status, a.body)
		}
	}
}
