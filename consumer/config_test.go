package consumer

import (
	"errors"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 10 * time.Second, Jitter: -1}
	for _, tc := range []struct {
		n    uint64
		want time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {1000, 10 * time.Second}} {
		if got := b.Delay(tc.n); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestBackoffJitter(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute, Jitter: 0.2}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.Delay(3) // 4s ± 20%
		if d < 3200*time.Millisecond || d > 4800*time.Millisecond {
			t.Fatalf("Delay(3) = %v, outside 4s ± 20%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct delays in 200: jitter does not spread", len(seen))
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.InFlightTokens != DefaultInFlightTokens || c.InteractiveTokens != DefaultInteractiveTokens || c.RequestQueueTokens != 8*DefaultInteractiveTokens ||
		c.Delivery != (DeliveryLimits{AckWait: 30 * time.Second, MaxDeliver: 5}) || c.NakBackoff.Base != DefaultNakBase || c.NakBackoff.Jitter != DefaultNakJitter ||
		c.Limits.MaxTexts == 0 || c.Logger == nil || c.Metrics == nil || c.Now == nil {
		t.Errorf("defaults not filled: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	cons, err := New(Config{}, &fakeEmb{}, &fakePub{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.heartbeatEvery(); got != 15*time.Second {
		t.Errorf("heartbeat every %v, want half of 30s", got)
	}
	if cons.finalDelivery(4) || !cons.finalDelivery(5) || !cons.finalDelivery(6) {
		t.Error("final delivery is the MaxDeliver'th")
	}
	if err := cons.SetDeliveryLimits(DeliveryLimits{AckWait: time.Second, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	if cons.finalDelivery(1<<40) || cons.heartbeatEvery() != 500*time.Millisecond {
		t.Error("MaxDeliver -1 has no final delivery; heartbeats follow the new AckWait")
	}
	if err := cons.SetDeliveryLimits(DeliveryLimits{AckWait: 0, MaxDeliver: 2}); !errors.Is(err, ErrConfig) {
		t.Errorf("AckWait 0: err %v", err)
	}
}

func TestConfigInvalid(t *testing.T) {
	for name, c := range map[string]Config{
		"fraction 1":     {InProgressFraction: 1},
		"max deliver -2": {Delivery: DeliveryLimits{MaxDeliver: -2}},
		"jitter over 1":  {NakBackoff: Backoff{Jitter: 1.5}},
		"max below base": {NakBackoff: Backoff{Base: time.Minute, Max: time.Second}},
	} {
		if _, err := New(c, &fakeEmb{}, &fakePub{}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	if _, err := New(Config{}, nil, &fakePub{}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil embedder: %v", err)
	}
}
