package schema

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of [ReplyPolicy.MaxBytes]. A reply subject travels in the control
// line of the publish that sends the result, and nats-server closes the
// connection on a control line over its max_control_line (4 KiB by
// default): the ceiling keeps every allowed reply far below that.
const (
	DefaultMaxReplyBytes = 256
	MaxReplyBytesCeiling = 1024
)

// DefaultReplyDeny are the subjects of the default configuration that a
// result must never be published to, whatever the allow-list says: the
// jobs, the dead letters and the request-reply service.
func DefaultReplyDeny() []string { return []string{SubjectJobs, SubjectDLQ, SubjectService} }

// ReplyPolicy decides which subjects a result may be published to. A reply
// subject comes from the job (its reply field, the Embed-Reply header or the
// request's own reply inbox), that is from the network: published to
// unchecked, it would let a producer write into the KV buckets, forge dead
// letters, requeue jobs or forge another tenant's results with the
// consumer's permissions.
//
// A reply is allowed only if it is a literal subject (non-empty tokens, no
// '*' or '>', no whitespace or control characters, valid UTF-8) of at most
// MaxBytes bytes, does not start with '$' (the server's own subjects: $KV,
// $JS, $SYS, $SRV...), matches none of Deny, and lies in the space of the
// job's tenant (see [Tenancy.Space]) or matches one of Allow.
type ReplyPolicy struct {
	// Allow are subject patterns (NATS wildcards) a reply may match besides
	// its tenant's space. [TenantPlaceholder] in a pattern stands for the
	// job's tenant ("audit.{tenant}.>"); a pattern with it applies only to
	// jobs with a tenant, one without it to every job (any tenant may then
	// send results there). Empty: the tenant's space alone.
	Allow []string
	// Deny are subject patterns a reply must not match even when it is in
	// the tenant's space or Allow matches; empty means [DefaultReplyDeny].
	Deny []string
	// MaxBytes is the longest reply; 0 means [DefaultMaxReplyBytes].
	MaxBytes int
	// Tenancy says where a job's tenant is and what its space is.
	Tenancy Tenancy
}

// WithDefaults returns p with every unset field filled in.
func (p ReplyPolicy) WithDefaults() ReplyPolicy {
	if len(p.Deny) == 0 {
		p.Deny = DefaultReplyDeny()
	}
	if p.MaxBytes <= 0 {
		p.MaxBytes = DefaultMaxReplyBytes
	}
	p.Tenancy = p.Tenancy.WithDefaults()
	return p
}

// Validate reports a policy that cannot work: a malformed pattern, an
// allow pattern under '$' (such replies are always refused), MaxBytes
// above [MaxReplyBytesCeiling] or unusable tenancy prefixes.
func (p ReplyPolicy) Validate() error {
	if p.MaxBytes > MaxReplyBytesCeiling {
		return fmt.Errorf("max reply bytes %d is over the ceiling of %d", p.MaxBytes, MaxReplyBytesCeiling)
	}
	for _, pat := range p.Deny {
		if !ValidPattern(pat) {
			return fmt.Errorf("reply pattern %s is not a subject pattern", quoteShort(pat))
		}
	}
	for _, pat := range p.Allow {
		if !ValidPattern(forTenant(pat, "t")) {
			return fmt.Errorf("reply pattern %s is not a subject pattern", quoteShort(pat))
		}
		if strings.HasPrefix(pat, "$") {
			return fmt.Errorf("reply pattern %s: replies under $ are always refused", quoteShort(pat))
		}
	}
	return p.Tenancy.Validate()
}

// Unscoped returns the allow patterns without [TenantPlaceholder]: with
// tenancy on, every tenant may send results to them.
func (p ReplyPolicy) Unscoped() []string {
	var out []string
	for _, pat := range p.Allow {
		if !strings.Contains(pat, TenantPlaceholder) {
			out = append(out, pat)
		}
	}
	return out
}

// Check returns nil when reply may receive the result of a job of tenant
// ("" for none: see [Tenancy.Space]), and otherwise an *Error with
// [CodeBadReply] whose message quotes at most the first bytes of reply. The
// empty reply (no reply at all) is not checked here. A request's own inbox
// is checked the same way: the service answers only inside the
// requester's space.
func (p ReplyPolicy) Check(tenant, reply string) *Error {
	p = p.WithDefaults()
	switch {
	case len(reply) > p.MaxBytes:
		return Errorf(CodeBadReply, "reply subject of %d bytes is over the limit of %d", len(reply), p.MaxBytes)
	case !utf8.ValidString(reply):
		return Errorf(CodeBadReply, "reply subject is not valid UTF-8")
	case !LiteralSubject(reply):
		return Errorf(CodeBadReply, "reply subject %s is not a literal subject", quoteShort(reply))
	case strings.HasPrefix(reply, "$"):
		return Errorf(CodeBadReply, "reply subject %s is a system subject", quoteShort(reply))
	case tenant != "" && !ValidTenant(tenant):
		return Errorf(CodeBadReply, "tenant %s is not one subject token", quoteShort(tenant))
	}
	for _, pat := range p.Deny {
		if MatchSubject(pat, reply) {
			return Errorf(CodeBadReply, "reply subject %s is under %s", quoteShort(reply), pat)
		}
	}
	space := p.Tenancy.Space(tenant)
	for _, pat := range space {
		if MatchSubject(pat, reply) {
			return nil
		}
	}
	for _, pat := range p.Allow {
		if strings.Contains(pat, TenantPlaceholder) {
			if tenant == "" {
				continue
			}
			pat = forTenant(pat, tenant)
		}
		if MatchSubject(pat, reply) {
			return nil
		}
	}
	who := "the shared space"
	if tenant != "" {
		who = "tenant " + quoteShort(tenant) + "'s space"
	}
	return Errorf(CodeBadReply, "reply subject %s is outside %s (%s) and the allow-list", quoteShort(reply), who, strings.Join(space, ","))
}

// forTenant puts tenant in place of [TenantPlaceholder] in pattern.
func forTenant(pattern, tenant string) string {
	return strings.ReplaceAll(pattern, TenantPlaceholder, tenant)
}

// ParsePatterns parses a comma-separated list of subject patterns (the
// form of the --reply-allow flag), ignoring blanks around them. An empty
// list is nil (the default).
func ParsePatterns(s string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !ValidPattern(part) {
			return nil, fmt.Errorf("%s is not a subject pattern", quoteShort(part))
		}
		out = append(out, part)
	}
	return out, nil
}

// LiteralSubject reports whether s is a subject that can be published to:
// dot-separated non-empty tokens without '*' or '>' and without whitespace
// or control characters, in valid UTF-8. Length is not checked.
func LiteralSubject(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || strings.ContainsFunc(tok, badSubjectRune) || strings.ContainsAny(tok, "*>") {
			return false
		}
	}
	return true
}

// ValidPattern reports whether s is a subject pattern: tokens as in
// [LiteralSubject], or "*" (one token), or ">" as the last token (the
// rest).
func ValidPattern(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		switch {
		case tok == ">":
			if i != len(toks)-1 {
				return false
			}
		case tok == "*":
		case tok == "" || strings.ContainsFunc(tok, badSubjectRune) || strings.ContainsAny(tok, "*>"):
			return false
		}
	}
	return true
}

// MatchSubject reports whether the literal subject matches pattern, with
// NATS wildcards: '*' matches one token, a final '>' one or more.
func MatchSubject(pattern, subject string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		s, srest, smore := strings.Cut(subject, ".")
		switch {
		case p == ">":
			return s != ""
		case p != "*" && p != s:
			return false
		case !pmore || !smore:
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

func badSubjectRune(r rune) bool {
	return r <= ' ' || r == 0x7f || unicode.IsSpace(r) || unicode.IsControl(r)
}

// quoteShort quotes at most the first 64 bytes of s (cut on a rune
// boundary, and shorter when escapes make the quote long), so that a
// refused subject never makes a message long.
func quoteShort(s string) string {
	const n = 64
	cut := min(len(s), n)
	for {
		for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut--
		}
		q := strconv.Quote(s[:cut])
		if len(q) <= n+16 || cut == 0 {
			if cut < len(s) {
				q += fmt.Sprintf("... (%d bytes)", len(s))
			}
			return q
		}
		cut /= 2
	}
}
