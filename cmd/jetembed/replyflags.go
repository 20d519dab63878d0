package main

import (
	"fmt"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// replyPolicy is the policy of --reply-allow and --max-reply-bytes, with the
// configured jobs and DLQ subjects and the service subject always refused.
func (f *serveFlags) replyPolicy(cfg jetstream.Config) (schema.ReplyPolicy, error) {
	allow, err := schema.ParsePatterns(*f.replyAllow)
	if err != nil {
		return schema.ReplyPolicy{}, fmt.Errorf("%w: --reply-allow: %w", errUsage, err)
	}
	deny := append(schema.DefaultReplyDeny(), cfg.Jobs.Subjects...)
	deny = append(append(deny, cfg.DLQ.Subjects...), jetstream.EndpointSubject)
	p := schema.ReplyPolicy{Allow: allow, Deny: deny, MaxBytes: *f.maxReplyBytes}
	if *f.maxReplyBytes <= 0 {
		return p, fmt.Errorf("%w: --max-reply-bytes %d must be positive", errUsage, *f.maxReplyBytes)
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return p, fmt.Errorf("%w: %w", errUsage, err)
	}
	return p, nil
}
