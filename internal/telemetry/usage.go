package telemetry

import (
	"context"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jetembed/jetembed/schema"
)

// DefaultMetricTenants is how many tenants get a tenant label of their own
// in the jetembed_tenant_* families unless [Metrics.LimitTenants] says
// otherwise.
const DefaultMetricTenants = 100

// The tenant label values that are no tenant's name: '*' cannot be in a
// subject token, so no tenant is called so.
const (
	// TenantOther is the label of every tenant beyond the cap.
	TenantOther = "*other"
	// TenantNone is the label of jobs without a tenant (tenancy off, or a
	// request on the service's bare subject).
	TenantNone = "*none"
)

const labelTenant = attribute.Key("tenant")

// Usage is what one job settled for good cost, as the per-tenant metrics
// count it.
type Usage struct {
	Tenant string
	// Code is the job-level error code, empty on success.
	Code                      schema.Code
	Texts, Tokens             int64
	PaddedTokens              int64
	Compute                   time.Duration
	CachedTexts, CachedTokens int64
}

// usageInstruments are the jetembed_tenant_* families and the usage
// store's counters.
type usageInstruments struct {
	jobs, texts, tokens, padded metric.Int64Counter
	cachedTexts, cachedTokens   metric.Int64Counter
	compute                     metric.Float64Counter
	unrecorded                  metric.Int64Counter

	mu      sync.Mutex
	limit   int                 // tenants with a label of their own; < 0 none
	tenants map[string]struct{} // those that have one
	names   map[string]string   // key -> the name it is labelled by
	sets    map[usageKey]metric.MeasurementOption
}

type usageKey struct{ tenant, code string }

func (u *usageInstruments) create(counter func(name, desc string) metric.Int64Counter, fcounter func(name, desc string) metric.Float64Counter) {
	u.jobs = counter("jetembed_tenant_jobs_total", "Jobs settled for good (acknowledged or terminated), counted once per job, by tenant and error code (none on success).")
	u.texts = counter("jetembed_tenant_texts_total", "Texts of the jobs settled for good, by tenant.")
	u.tokens = counter("jetembed_tenant_tokens_total", "Real tokens of the texts answered (cached ones too), by tenant.")
	u.padded = counter("jetembed_tenant_padded_tokens_total", "Tokens run including padding for the jobs settled for good, by tenant.")
	u.compute = fcounter("jetembed_tenant_compute_seconds_total", "Session time of the runs that held the jobs' texts (each run shared by its rows), by tenant.")
	u.cachedTexts = counter("jetembed_tenant_cached_texts_total", "Texts the fleet's cache answered without a model run, by tenant.")
	u.cachedTokens = counter("jetembed_tenant_cached_tokens_total", "Tokens of the texts the fleet's cache answered, by tenant.")
	u.unrecorded = counter("jetembed_usage_unrecorded_total", "Usage events the usage store did not take, by result: retried (the job was NAKed, to be counted when it runs again) or lost (settled without it).")
	u.limit = DefaultMetricTenants
}

// LimitTenants sets how many tenants get a tenant label of their own in the
// jetembed_tenant_* families: the first n this process counts, in the
// order it meets them; every other is counted as [TenantOther], so that
// the families' series stay bounded whoever connects. 0 labels none (every
// tenant is TenantOther). Exact per-tenant figures are the usage store's.
func (m *Metrics) LimitTenants(n int) {
	if m == nil {
		return
	}
	u := &m.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	u.limit = max(n, 0)
}

// NameTenants labels the tenants of names (key -> name: JWT mode's
// tenants.tsv, where a tenant is its account's public key) by their names
// in the jetembed_tenant_* families; the others keep their own. The
// operator's file bounds it: it does not change how many tenants get a
// label of their own.
func (m *Metrics) NameTenants(names map[string]string) {
	if m == nil {
		return
	}
	u := &m.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	u.names = make(map[string]string, len(names))
	for key, name := range names {
		// A label the exposition refuses (invalid UTF-8 fails every
		// scrape) or a reserved one stays the key.
		if name != "" && utf8.ValidString(name) && !strings.HasPrefix(name, "*") {
			u.names[key] = name
		}
	}
}

// tenantLabel returns the label value of tenant (its name, if it has one),
// admitting it among the labelled ones while there is room. Called with
// u.mu held.
func (u *usageInstruments) tenantLabel(tenant string) string {
	if tenant == "" {
		return TenantNone
	}
	label := tenant
	if name, ok := u.names[tenant]; ok {
		label = name
	}
	if _, ok := u.tenants[tenant]; ok {
		return label
	}
	if len(u.tenants) >= u.limit {
		return TenantOther
	}
	if u.tenants == nil {
		u.tenants = map[string]struct{}{}
	}
	u.tenants[tenant] = struct{}{}
	return label
}

// TenantUsage counts one job settled for good in the jetembed_tenant_*
// families: the job under its code, its texts, tokens, padded tokens,
// compute seconds and cached texts and tokens under its tenant.
func (m *Metrics) TenantUsage(ctx context.Context, x Usage) {
	if m == nil {
		return
	}
	u := &m.usage
	code := string(x.Code)
	if code == "" {
		code = codeNone
	}
	u.mu.Lock()
	tenant := u.tenantLabel(x.Tenant)
	jobSet, ok := u.sets[usageKey{tenant, code}]
	if !ok {
		if u.sets == nil {
			u.sets = map[usageKey]metric.MeasurementOption{}
		}
		jobSet = metric.WithAttributeSet(attribute.NewSet(labelTenant.String(tenant), labelCode.String(code)))
		u.sets[usageKey{tenant, code}] = jobSet
	}
	tenantSet, ok := u.sets[usageKey{tenant: tenant}]
	if !ok {
		tenantSet = metric.WithAttributeSet(attribute.NewSet(labelTenant.String(tenant)))
		u.sets[usageKey{tenant: tenant}] = tenantSet
	}
	u.mu.Unlock()

	u.jobs.Add(ctx, 1, jobSet)
	u.texts.Add(ctx, x.Texts, tenantSet)
	u.tokens.Add(ctx, x.Tokens, tenantSet)
	u.padded.Add(ctx, x.PaddedTokens, tenantSet)
	u.compute.Add(ctx, x.Compute.Seconds(), tenantSet)
	if x.CachedTexts > 0 || x.CachedTokens > 0 {
		u.cachedTexts.Add(ctx, x.CachedTexts, tenantSet)
		u.cachedTokens.Add(ctx, x.CachedTokens, tenantSet)
	}
}

// UsageUnrecorded counts a usage event the store did not take; result is
// "retried" or "lost".
func (m *Metrics) UsageUnrecorded(ctx context.Context, result string) {
	if m == nil {
		return
	}
	m.usage.unrecorded.Add(ctx, 1, m.labels.one(attribute.Key("result"), result))
}
