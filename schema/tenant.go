package schema

import (
	"fmt"
	"strconv"
	"strings"
)

// Defaults of [Tenancy].
const (
	// DefaultTenantToken is where the tenant is in a job's subject:
	// embed.jobs.<tenant>.<...> is token 3.
	DefaultTenantToken = 3
	// DefaultTenantResultsPrefix is the results subject prefix: a tenant's
	// results are under embed.results.<tenant>.>.
	DefaultTenantResultsPrefix = "embed.results" // SubjectResults less its ".>"
	// DefaultTenantInboxPrefix makes a tenant's inbox: _INBOX_<tenant>.>,
	// the prefix its connection sets with nats.CustomInboxPrefix.
	DefaultTenantInboxPrefix = "_INBOX_"
	// SharedInbox is the inbox of a caller without a tenant: nats.go's
	// default prefix.
	SharedInbox = "_INBOX"
	// TenantPlaceholder stands for the job's tenant in a reply allow
	// pattern (--reply-allow "audit.{tenant}.>").
	TenantPlaceholder = "{tenant}"
	// RoutedReplyPrefix starts the reply subject nats-server gives a
	// request that crossed accounts through a service import: the server
	// maps it (_R_.<random>.<random>) back to the requester's own inbox,
	// in the requester's account, and to nobody else.
	RoutedReplyPrefix = "_R_"
)

// Tenancy says who a job belongs to and where its results may go. A tenant
// is the identity the NATS server authenticates: the server's permissions
// let a tenant publish jobs only under embed.jobs.<tenant>.> and requests
// only to embed.v1.embed.<tenant>, so the tenant token of the subject a job
// arrived on is vouched for by the server, never by the job's body.
//
// The zero value is the default: tenants on, at token
// [DefaultTenantToken] of a job's subject, with the default prefixes.
type Tenancy struct {
	// Off puts every job in one shared space (one producer, or producers
	// that trust each other): no tenant is read from the subject.
	Off bool
	// Token is the 1-based position of the tenant in a job's subject; 0
	// means [DefaultTenantToken].
	Token int
	// ResultsPrefix and InboxPrefix make a tenant's space:
	// <ResultsPrefix>.<tenant>.> and <InboxPrefix><tenant>.>; empty means
	// [DefaultTenantResultsPrefix] and [DefaultTenantInboxPrefix].
	ResultsPrefix, InboxPrefix string
	// Accounts says that tenants are NATS accounts importing the fleet's
	// subjects (deploy/nats/accounts.conf): a tenant's request arrives
	// through a service import with a reply the server routes back to it
	// alone ([RoutedReplyPrefix].>), which is then in the tenant's space
	// too. Only the server creates such replies in the fleet's account
	// (tenants have no user there), and their names are random.
	Accounts bool
}

// WithDefaults returns t with every unset field filled in.
func (t Tenancy) WithDefaults() Tenancy {
	if t.Token == 0 {
		t.Token = DefaultTenantToken
	}
	if t.ResultsPrefix == "" {
		t.ResultsPrefix = DefaultTenantResultsPrefix
	}
	if t.InboxPrefix == "" {
		t.InboxPrefix = DefaultTenantInboxPrefix
	}
	return t
}

// Validate reports a tenancy that cannot work: a token position below 1, a
// results prefix that is not a literal subject or an inbox prefix that is
// not the start of one token.
func (t Tenancy) Validate() error {
	t = t.WithDefaults()
	switch {
	case t.Token < 1:
		return fmt.Errorf("tenant token position %d: want 1 or more", t.Token)
	case !LiteralSubject(t.ResultsPrefix) || strings.HasPrefix(t.ResultsPrefix, "$"):
		return fmt.Errorf("tenant results prefix %s is not a literal subject outside $", quoteShort(t.ResultsPrefix))
	case !LiteralSubject(t.InboxPrefix+"t") || strings.Contains(t.InboxPrefix, ".") || strings.HasPrefix(t.InboxPrefix, "$"):
		return fmt.Errorf("tenant inbox prefix %s must start one subject token", quoteShort(t.InboxPrefix))
	}
	return nil
}

// CheckJobSubjects reports a jobs stream subject on which some job would
// have no tenant token: the pattern must have at least Token tokens, none
// of them a '>' before the tenant's.
func (t Tenancy) CheckJobSubjects(patterns []string) error {
	if t.Off {
		return nil
	}
	t = t.WithDefaults()
	for _, pat := range patterns {
		toks := strings.Split(pat, ".")
		ok := len(toks) >= t.Token
		for _, tok := range toks[:min(len(toks), t.Token-1)] {
			ok = ok && tok != ">"
		}
		if !ok {
			return fmt.Errorf("jobs subject %s has no token %d on every subject for the tenant (--tenant-token)", quoteShort(pat), t.Token)
		}
	}
	return nil
}

// JobTenant returns the tenant of a job that arrived on subject: its token
// at position Token. ok is false when tenancy is on and the subject has no
// valid tenant token (such a job has no space to answer in); with tenancy
// off the tenant is "" and ok is true.
func (t Tenancy) JobTenant(subject string) (tenant string, ok bool) {
	if t.Off {
		return "", true
	}
	tenant = SubjectToken(subject, t.WithDefaults().Token)
	return tenant, ValidTenant(tenant)
}

// Space returns the subject patterns a result of tenant may go to without
// an allow-list entry: <ResultsPrefix>.<tenant>.> and
// <InboxPrefix><tenant>.>, and with [Tenancy.Accounts] the server's routed
// replies ([RoutedReplyPrefix].>). Without a tenant it is the shared space:
// with tenancy off (one space for every job) <ResultsPrefix>.> and
// _INBOX.>; with tenancy on (a request on the service's bare subject, which
// names no tenant) _INBOX.> alone, so that such a request never reaches any
// tenant's results.
func (t Tenancy) Space(tenant string) []string {
	t = t.WithDefaults()
	switch {
	case tenant != "" && t.Accounts:
		return []string{t.ResultsPrefix + "." + tenant + ".>", t.InboxPrefix + tenant + ".>", RoutedReplyPrefix + ".>"}
	case tenant != "":
		return []string{t.ResultsPrefix + "." + tenant + ".>", t.InboxPrefix + tenant + ".>"}
	case t.Off:
		return []string{t.ResultsPrefix + ".>", SharedInbox + ".>"}
	}
	return []string{SharedInbox + ".>"}
}

// DefaultResultsConsumers is how many results consumers a tenant may have
// at once in the shipped deploy configuration: the names
// [ResultsConsumerName](tenant, 0..n-1) its account imports (or its user
// is granted), each one reader of its stored results.
const DefaultResultsConsumers = 4

// ResultsConsumerName is the name of a tenant's k-th results consumer:
// <tenant>_r<k>. The names of the results stream's consumers are one
// namespace for every tenant; the server grants each tenant creating
// (and deleting) only its own, so their number is the tenant's cap, and
// no tenant can take another's.
func ResultsConsumerName(tenant string, k int) string {
	return tenant + "_r" + strconv.Itoa(k)
}

// MaxTenantBytes is the longest tenant: an account's bound name (at most
// 63 bytes from `jetembed tenant add`) or public key (56) fits many times
// over, and a usage event can always carry it.
const MaxTenantBytes = 256

// ValidTenant reports whether s can be a tenant: one subject token as
// [LiteralSubject] has them (no '*' or '>' inside, no whitespace or control
// characters) of at most [MaxTenantBytes].
func ValidTenant(s string) bool {
	return s != "" && len(s) <= MaxTenantBytes && !strings.Contains(s, ".") && LiteralSubject(s)
}

// SubjectToken returns the token of subject at 1-based position pos, or "".
func SubjectToken(subject string, pos int) string {
	if pos < 1 {
		return ""
	}
	for i := 1; ; i++ {
		tok, rest, more := strings.Cut(subject, ".")
		if i == pos {
			return tok
		}
		if !more {
			return ""
		}
		subject = rest
	}
}
