package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// UsageVersion is the version of [UsageEvent].
const UsageVersion = 1

// UsageNoTenant is the subject token of the usage of a job without a
// tenant (tenancy off, or a request on the service's bare subject): every
// token is some tenant's possible name, so the event's own tenant field
// (empty) is what tells them apart.
const UsageNoTenant = "_"

// Bounds of a [UsageEvent] as [DecodeUsageEvent] accepts it: the usage
// stream is the fleet's own, but a reader takes nothing on trust, and the
// sums of a month of events must not overflow.
const (
	MaxUsageEventBytes   = 4 << 10
	maxUsageTexts        = 1 << 24
	maxUsageTokens       = 1 << 40
	maxUsageSeconds      = 1 << 20
	maxUsageCodeBytes    = 64
	MaxUsageJobBytes     = DefaultMaxIDBytes
	maxUsageDeliveredCnt = 1 << 20
)

// ErrUsageEvent is what [DecodeUsageEvent] wraps for an event it refuses.
var ErrUsageEvent = errors.New("bad usage event")

// UsageEvent is what one job cost, stored once per job in the usage stream
// ([StreamUsage], on [UsageSubject]) when the job is settled for good: its
// result confirmed and its message about to be acknowledged, or the job
// terminated. It is JSON, so `nats stream view` shows it as it is.
//
// Tokens are the real tokens of the texts answered (a text the fleet's
// cache answered counts its tokens too, and also in CachedTokens), padded
// tokens and compute seconds what the job's texts took of the session
// runs that held them (a share of each run in proportion to its rows).
// A failed job counts under its error code with what it ran.
type UsageEvent struct {
	V      int    `json:"v"`
	Tenant string `json:"tenant,omitempty"`
	// Job is the job's id as it named it (cut to [MaxUsageJobBytes]), for
	// an audit; it identifies nothing: the event's Nats-Msg-Id does.
	Job string `json:"job,omitempty"`
	// Code is the job-level error code, empty on success.
	Code Code `json:"code,omitempty"`
	// Request marks a request-reply call (not a stored job).
	Request        bool    `json:"request,omitempty"`
	Texts          int64   `json:"texts"`
	Tokens         int64   `json:"tokens"`
	PaddedTokens   int64   `json:"padded_tokens"`
	ComputeSeconds float64 `json:"compute_seconds"`
	// CachedTexts and CachedTokens are the texts, and their tokens, the
	// fleet's cache answered without a model run.
	CachedTexts  int64 `json:"cached_texts,omitempty"`
	CachedTokens int64 `json:"cached_tokens,omitempty"`
	// Delivered is the delivery that was settled (1 for a request).
	Delivered uint64 `json:"delivered,omitempty"`
}

// UsageSubject is the subject of tenant's usage events under prefix (the
// usage stream's subject less its ".>"; "" means [SubjectUsage]'s).
func UsageSubject(prefix, tenant string) string {
	if prefix == "" {
		prefix = strings.TrimSuffix(SubjectUsage, ".>")
	}
	if tenant == "" {
		tenant = UsageNoTenant
	}
	return prefix + "." + tenant
}

// EncodeUsageEvent returns e as JSON, with its version set.
func EncodeUsageEvent(e UsageEvent) ([]byte, error) {
	e.V = UsageVersion
	if !utf8.ValidString(e.Job) {
		e.Job = strings.ToValidUTF8(e.Job, "")
	}
	if len(e.Job) > MaxUsageJobBytes {
		e.Job = strings.ToValidUTF8(e.Job[:MaxUsageJobBytes], "")
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// DecodeUsageEvent reads an event as [EncodeUsageEvent] writes it,
// refusing (with [ErrUsageEvent]) one that is too large, not JSON of that
// shape, of another version, or with a count out of its bounds.
func DecodeUsageEvent(data []byte) (UsageEvent, error) {
	var e UsageEvent
	if len(data) > MaxUsageEventBytes {
		return e, fmt.Errorf("%w: %d bytes", ErrUsageEvent, len(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return UsageEvent{}, fmt.Errorf("%w: %v", ErrUsageEvent, err)
	}
	if dec.More() {
		return UsageEvent{}, fmt.Errorf("%w: data after the event", ErrUsageEvent)
	}
	if e.V != UsageVersion {
		return UsageEvent{}, fmt.Errorf("%w: version %d", ErrUsageEvent, e.V)
	}
	if err := e.check(); err != nil {
		return UsageEvent{}, err
	}
	return e, nil
}

func (e UsageEvent) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsageEvent}, args...)...)
	}
	switch {
	case e.Tenant != "" && !ValidTenant(e.Tenant):
		return bad("tenant is not a tenant")
	case len(e.Code) > maxUsageCodeBytes || strings.IndexFunc(string(e.Code), notCodeRune) >= 0:
		return bad("code is not an error code")
	case len(e.Job) > MaxUsageJobBytes || !utf8.ValidString(e.Job):
		return bad("job id over %d bytes or not UTF-8", MaxUsageJobBytes)
	case e.Texts < 0 || e.Texts > maxUsageTexts || e.CachedTexts < 0 || e.CachedTexts > e.Texts:
		return bad("texts %d, cached %d", e.Texts, e.CachedTexts)
	case e.Tokens < 0 || e.Tokens > maxUsageTokens || e.PaddedTokens < 0 || e.PaddedTokens > maxUsageTokens:
		return bad("tokens %d, padded %d", e.Tokens, e.PaddedTokens)
	case e.CachedTokens < 0 || e.CachedTokens > e.Tokens:
		return bad("cached tokens %d of %d", e.CachedTokens, e.Tokens)
	case math.IsNaN(e.ComputeSeconds) || e.ComputeSeconds < 0 || e.ComputeSeconds > maxUsageSeconds:
		return bad("compute seconds %v", e.ComputeSeconds)
	case e.Delivered > maxUsageDeliveredCnt:
		return bad("delivery %d", e.Delivered)
	}
	return nil
}

func notCodeRune(r rune) bool { return (r < 'a' || r > 'z') && r != '_' && (r < '0' || r > '9') }
