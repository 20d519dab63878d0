package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/telemetry"
)

// TestTenantUsageBounded: the per-tenant families label the first tenants
// up to the cap and count every other as *other, so that whoever connects
// cannot grow /metrics; jobs without a tenant are *none; and the sums are
// exact whichever label a tenant got.
func TestTenantUsageBounded(t *testing.T) {
	m, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer m.Shutdown(ctx)
	m.LimitTenants(2)
	for i, tenant := range []string{"acme", "globex", "acme", "initech", "umbrella", "", "globex"} {
		for n := range 10 {
			m.TenantUsage(ctx, telemetry.Usage{Tenant: tenant, Texts: 2, Tokens: int64(100 + i), PaddedTokens: 128, Compute: time.Millisecond})
			if n == 0 && tenant == "initech" {
				m.TenantUsage(ctx, telemetry.Usage{Tenant: fmt.Sprint(tenant, n), Code: "text_too_long", Texts: 1})
			}
		}
	}
	fams := scrape(t, m.Handler())
	want := map[string]float64{"acme": 10*100 + 10*102, "globex": 10*101 + 10*106, telemetry.TenantOther: 10*103 + 10*104, telemetry.TenantNone: 10 * 105}
	f := fams["jetembed_tenant_tokens_total"]
	if f == nil {
		t.Fatal("jetembed_tenant_tokens_total not exposed")
	}
	if len(f.GetMetric()) != len(want) {
		t.Errorf("%d tenant series, want %d (the cap and the two reserved labels)", len(f.GetMetric()), len(want))
	}
	for tenant, tokens := range want {
		if got := sample(t, fams, "jetembed_tenant_tokens_total", map[string]string{"tenant": tenant}).GetCounter().GetValue(); got != tokens {
			t.Errorf("tenant %s: %v tokens, want %v", tenant, got, tokens)
		}
	}
	if got := sample(t, fams, "jetembed_tenant_jobs_total", map[string]string{"tenant": telemetry.TenantOther, "code": "text_too_long"}).GetCounter().GetValue(); got != 1 {
		t.Errorf("%v failed jobs of *other, want 1", got)
	}
	if got := sample(t, fams, "jetembed_tenant_jobs_total", map[string]string{"tenant": "acme", "code": "none"}).GetCounter().GetValue(); got != 20 {
		t.Errorf("%v jobs of acme, want 20", got)
	}
}

// TestTenantUsageNamed: with a key -> name table (JWT mode, where a tenant
// is its account's key) a named tenant is labelled by its name, the others
// by their own token, and the cap counts tenants as before.
func TestTenantUsageNamed(t *testing.T) {
	m, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer m.Shutdown(ctx)
	const acmeKey = "ADQJYBYUUIVXDEVYNI7ZKT2LJ5MRBUTYCIBUEJ6GAS4OIVJRBNSX4C2H"
	m.LimitTenants(2)
	// A name /metrics could not carry (invalid UTF-8 fails every scrape)
	// or a reserved one leaves the tenant its key.
	m.NameTenants(map[string]string{acmeKey: "acme", "globex": "\xff\xfe", "initech": "*other"})
	for _, tenant := range []string{acmeKey, "globex", acmeKey, "initech"} {
		m.TenantUsage(ctx, telemetry.Usage{Tenant: tenant, Texts: 1, Tokens: 10})
	}
	fams := scrape(t, m.Handler())
	want := map[string]float64{"acme": 20, "globex": 10, telemetry.TenantOther: 10}
	if n := len(fams["jetembed_tenant_tokens_total"].GetMetric()); n != len(want) {
		t.Errorf("%d tenant series, want %d", n, len(want))
	}
	for tenant, tokens := range want {
		if got := sample(t, fams, "jetembed_tenant_tokens_total", map[string]string{"tenant": tenant}).GetCounter().GetValue(); got != tokens {
			t.Errorf("tenant %s: %v tokens, want %v", tenant, got, tokens)
		}
	}
}
