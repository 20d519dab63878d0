package jetstream

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"replicas 0", func(c *Config) { c.Replicas = 0 }, "replicas 0"},
		{"replicas 7", func(c *Config) { c.Replicas = 7 }, "replicas 7"},
		{"dotted stream name", func(c *Config) { c.Jobs.Name = "EMBED.JOBS" }, `jobs stream: bad name "EMBED.JOBS"`},
		{"same stream twice", func(c *Config) { c.DLQ.Name = c.Results.Name }, "also the results stream"},
		{"no subjects", func(c *Config) { c.Results.Subjects = nil }, "results stream EMBED_RESULTS: no subjects"},
		{"dedupe beyond age", func(c *Config) { c.Results.MaxAge = time.Minute }, "duplicate window 10m0s exceeds max age 1m0s"},
		{"bad max bytes", func(c *Config) { c.DLQ.MaxBytes = -5 }, "max bytes -5"},
		{"empty consumer", func(c *Config) { c.Consumer.Name = "" }, "consumer: empty name"},
		{"zero ack wait", func(c *Config) { c.Consumer.AckWait = 0; c.Consumer.BackOff = nil }, "ack wait 0s"},
		{"backoff first", func(c *Config) { c.Consumer.AckWait = time.Second }, "backoff[0] 1m0s must equal ack wait 1s"},
		{"backoff too long", func(c *Config) { c.Consumer.MaxDeliver = 2 }, "4 backoff delays exceed max deliver 2"},
		{"max deliver 0", func(c *Config) { c.Consumer.MaxDeliver = 0; c.Consumer.BackOff = nil }, "max deliver 0"},
		{"max ack pending", func(c *Config) { c.Consumer.MaxAckPending = 0 }, "max ack pending 0"},
		{"history", func(c *Config) { c.Engines.History = 0 }, "history 0"},
		{"marker ttl", func(c *Config) { c.Engines.LimitMarkerTTL = 0 }, "limit marker ttl 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.modify(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidateReportsAll(t *testing.T) {
	c := DefaultConfig()
	c.Replicas = 0
	c.Consumer.MaxAckPending = 0
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "replicas") || !strings.Contains(err.Error(), "max ack pending") {
		t.Fatalf("err = %v, want both problems", err)
	}
}

func TestExponentialBackOff(t *testing.T) {
	got := ExponentialBackOff(time.Second, 4)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestReportString(t *testing.T) {
	r := ProvisionReport{Outcomes: []ObjectOutcome{
		{Kind: "stream", Name: "EMBED_JOBS", Action: Created},
		{Kind: "stream", Name: "EMBED_DLQ", Action: Updated, Changes: []Change{{Field: "MaxAge", Have: "1h0m0s", Want: "2h0m0s"}}},
		{Kind: "consumer", Name: "EMBED_JOBS/embedder", Action: Refused, Changes: []Change{{Field: "AckPolicy", Have: "none", Want: "explicit"}}},
		{Kind: "kv", Name: "EMBED_ENGINES", Action: Failed, Err: errors.New("boom")},
	}}
	lines := strings.Split(strings.TrimSuffix(r.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), r)
	}
	for i, want := range []string{"EMBED_JOBS               created", "updated MaxAge 1h0m0s -> 2h0m0s", "refused AckPolicy none -> explicit", "failed: boom"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
	if !r.Refused() || !r.Changed() {
		t.Errorf("Refused=%v Changed=%v", r.Refused(), r.Changed())
	}
}
