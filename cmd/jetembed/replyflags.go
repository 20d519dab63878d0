package main

import (
	"fmt"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// replyPolicy is the policy of --reply-allow, --max-reply-bytes and the
// tenancy flags, with the configured jobs and DLQ subjects and the service
// subjects always refused.
func (f *serveFlags) replyPolicy(cfg jetstream.Config) (schema.ReplyPolicy, error) {
	allow, err := schema.ParsePatterns(f.replyAllow)
	if err != nil {
		return schema.ReplyPolicy{}, fmt.Errorf("%w: --reply-allow: %w", errUsage, err)
	}
	deny := append(schema.DefaultReplyDeny(), cfg.Jobs.Subjects...)
	deny = append(append(deny, cfg.DLQ.Subjects...), schema.SubjectEmbed, schema.SubjectEmbed+".>")
	p := schema.ReplyPolicy{Allow: allow, Deny: deny, MaxBytes: f.maxReplyBytes,
		Tenancy: schema.Tenancy{Off: f.tenantToken == 0, Token: f.tenantToken, ResultsPrefix: f.tenantResults, InboxPrefix: f.tenantInbox,
			Accounts: f.tenantAccounts}}
	if p.Tenancy.Off {
		p.Tenancy.Token = 0
	}
	switch {
	case f.maxReplyBytes <= 0:
		return p, fmt.Errorf("%w: --max-reply-bytes %d must be positive", errUsage, f.maxReplyBytes)
	case f.tenantToken < 0:
		return p, fmt.Errorf("%w: --tenant-token %d: want a token position, or 0 for no tenants", errUsage, f.tenantToken)
	case f.tenantResults == "" || f.tenantInbox == "":
		return p, fmt.Errorf("%w: --tenant-results-prefix and --tenant-inbox-prefix must not be empty", errUsage)
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return p, fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := p.Tenancy.CheckJobSubjects(cfg.Jobs.Subjects); err != nil {
		return p, fmt.Errorf("%w: %w", errUsage, err)
	}
	return p, nil
}
