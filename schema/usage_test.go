package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestUsageEventRoundTrip(t *testing.T) {
	e := UsageEvent{Tenant: "acme", Job: strings.Repeat("j", 300), Code: CodeTextTooLong, Texts: 3, Tokens: 90, PaddedTokens: 128,
		ComputeSeconds: 0.25, CachedTexts: 1, CachedTokens: 30, Delivered: 2}
	data, err := EncodeUsageEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeUsageEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	e.V, e.Job = UsageVersion, e.Job[:MaxUsageJobBytes]
	if got != e {
		t.Errorf("decoded %+v, want %+v", got, e)
	}
	if s := UsageSubject("", "acme"); s != "embed.usage.acme" {
		t.Errorf("subject %q", s)
	}
	if s := UsageSubject("u", ""); s != "u."+UsageNoTenant {
		t.Errorf("subject of no tenant %q", s)
	}
}

// TestUsageEventRefused: what is not an event as jetembed writes it is
// refused, never summed.
func TestUsageEventRefused(t *testing.T) {
	for _, data := range []string{
		``, `null`, `[]`, `{"v":1,"texts":1}{}`, `{"v":2,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0,"extra":1}`,
		`{"v":1,"texts":-1,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"texts":1,"tokens":1099511627777,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":-1}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":1e300}`,
		`{"v":1,"tenant":"a.b","texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"code":"Bad-Code","texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0,"cached_texts":2}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0,"cached_tokens":2}`,
		`{"v":1,"texts":1e30,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"job":"` + strings.Repeat("j", 300) + `","texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0}`,
		`{"v":1,"texts":1,"tokens":1,"padded_tokens":1,"compute_seconds":0,"tenant":"` + strings.Repeat("t", 5000) + `"}`,
	} {
		if e, err := DecodeUsageEvent([]byte(data)); !errors.Is(err, ErrUsageEvent) {
			t.Errorf("%.80s: decoded %+v, %v; want ErrUsageEvent", data, e, err)
		}
	}
}
