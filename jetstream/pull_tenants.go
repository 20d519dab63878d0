package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/schema"
)

// Per-tenant pulling (ConsumerSpec.PerTenant).
//
// JetStream has no fair share across the subjects of one consumer, so the
// fleet pulls each tenant's jobs through a consumer of its own, filtered on
// <prefix>.<tenant> and <prefix>.<tenant>.> of the work queue (a WorkQueue
// stream forbids overlapping filters, so there is no catch-all beside
// them), each with its own MaxAckPending. `jetembed provision` owns their
// settings: it keeps the durable [ConsumerSpec.Name] as the template,
// filtered on the bare prefix, which no job is published on. The members
// create a tenant's consumer from the template when the stream holds jobs
// no consumer covers, keep it in step with the template, and delete it
// after it has been empty for a while.

// Metadata keys of a tenant's consumer.
const (
	MetaTemplate = "jetembed.template" // the template's durable name
	MetaTenant   = "jetembed.tenant"   // the tenant it pulls for
)

// jobsPrefix is the jobs stream's one subject less its ".>": per-tenant
// pulling needs the stream to capture <prefix>.>, the tenant being the
// token after the prefix.
func (c Config) jobsPrefix() (string, error) {
	if len(c.Jobs.Subjects) != 1 || !strings.HasSuffix(c.Jobs.Subjects[0], ".>") {
		return "", fmt.Errorf("%w: per-tenant consumers need the jobs stream to have one subject PREFIX.> (have %q)", ErrConfig, c.Jobs.Subjects)
	}
	p := strings.TrimSuffix(c.Jobs.Subjects[0], ".>")
	if !schema.LiteralSubject(p) {
		return "", fmt.Errorf("%w: per-tenant consumers need a literal prefix before .> (have %q)", ErrConfig, c.Jobs.Subjects[0])
	}
	return p, nil
}

// TenantToken is the position of the tenant in a job's subject under
// per-tenant consumers: the token after the prefix.
func (c Config) TenantToken() int {
	p, err := c.jobsPrefix()
	if err != nil {
		return 0
	}
	return strings.Count(p, ".") + 2
}

// templateFilter is the template's filter: the bare prefix, on which no
// job is published (the stream captures <prefix>.>).
func (c Config) templateFilter() string {
	p, _ := c.jobsPrefix()
	return p
}

func tenantFilters(prefix, tenant string) []string {
	return []string{prefix + "." + tenant, prefix + "." + tenant + ".>"}
}

var plainTenant = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// TenantConsumerName is the durable name of tenant's consumer under
// template: <template>_<tenant>, or <template>_x<hash> for a tenant whose
// name cannot be a consumer's as it is.
func TenantConsumerName(template, tenant string) string {
	if plainTenant.MatchString(tenant) {
		return template + "_" + tenant
	}
	h := sha256.Sum256([]byte(tenant))
	return template + "_x" + hex.EncodeToString(h[:8])
}

// tenantConsumerConfig is tenant's consumer made from the template's
// settings.
func tenantConsumerConfig(template natsjs.ConsumerConfig, prefix, tenant string) natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{
		Durable:        TenantConsumerName(template.Durable, tenant),
		Description:    "jetembed: the jobs of tenant " + descTenant(tenant),
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		ReplayPolicy:   natsjs.ReplayInstantPolicy,
		AckWait:        template.AckWait,
		MaxDeliver:     template.MaxDeliver,
		BackOff:        template.BackOff,
		MaxAckPending:  template.MaxAckPending,
		FilterSubjects: tenantFilters(prefix, tenant),
		Replicas:       template.Replicas,
		Metadata:       map[string]string{MetaTemplate: template.Durable, MetaTenant: tenant},
	}
}

// isPerTenantTemplate reports whether the durable's filter makes it the
// template of per-tenant consumers.
func (c Config) isPerTenantTemplate(cc natsjs.ConsumerConfig) bool {
	p, err := c.jobsPrefix()
	return err == nil && cc.FilterSubject == p && len(cc.FilterSubjects) == 0
}

// descTenant is tenant as a consumer's description names it: at most 64
// bytes of it (a token the server stored may be near its 4 KiB limit of
// a description; the metadata keeps it whole).
func descTenant(tenant string) string {
	if len(tenant) <= 64 {
		return tenant
	}
	return strings.ToValidUTF8(tenant[:64], "") + "..."
}

// tenantOfSubject is the tenant token of a job's subject under prefix.
// A token that can be no tenant (over schema.MaxTenantBytes, a wildcard
// character inside one) gets a consumer too, so that the job loop refuses
// its jobs bad_reply rather than leave them in the work queue. A token
// that is a wildcard itself ("*", ">": a publish without permissions can
// store one) gets none: its consumer's filter would take every tenant's
// jobs. Such jobs stay in the queue until its MaxAge.
func tenantOfSubject(prefix, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", false
	}
	t, _, _ := strings.Cut(rest, ".")
	return t, t != "" && t != "*" && t != ">"
}

// ErrNotPerTenant: the jobs consumer is a catch-all, not a template.
var ErrNotPerTenant = errors.New("the jobs consumer is not a per-tenant template")

// Defaults of per-tenant pulling.
const (
	// DefaultTenantIdle is how long a tenant's consumer stays empty before
	// a member deletes it.
	DefaultTenantIdle = 10 * time.Minute
	// DefaultTenantScan bounds how often a member lists the subjects of
	// the jobs stream to find tenants without a consumer (when the counts
	// say some jobs are not covered), and is how often it lists them
	// anyway.
	DefaultTenantScan = time.Minute
	// DefaultMaxTenants bounds the consumers of tenants the shares do
	// not name ([FairConfig.MaxTenants]).
	DefaultMaxTenants = 128
)
