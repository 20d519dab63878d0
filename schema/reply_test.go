package schema

import (
	"strings"
	"testing"
)

func TestReplyPolicyCheck(t *testing.T) {
	var def ReplyPolicy
	off := ReplyPolicy{Tenancy: Tenancy{Off: true}}
	custom := ReplyPolicy{Allow: []string{"results.*.done", "replies.>", "audit.{tenant}.>", "x{tenant}y.>"}, Deny: []string{"replies.admin.>"}, MaxBytes: 32}
	moved := ReplyPolicy{Tenancy: Tenancy{ResultsPrefix: "out", InboxPrefix: "_IN_"}}
	for _, c := range []struct {
		name   string
		p      ReplyPolicy
		tenant string
		reply  string
		refuse bool
	}{
		{"own results", def, "run", "embed.results.run.job-1", false},
		{"own inbox", def, "pa", "_INBOX_pa.abc.def", false},
		{"utf-8 token", def, "é", "embed.results.é.1", false},
		{"another tenant's results", def, "pa", "embed.results.pb.doc-1", true},
		{"another tenant's inbox", def, "pa", "_INBOX_pb.guess.1", true},
		{"inbox prefix of a longer tenant", def, "pa", "_INBOX_pab.x", true},
		{"shared inbox with a tenant", def, "pa", "_INBOX.abc", true},
		{"tenant's results root", def, "pa", "embed.results.pa", true},
		{"anything else", def, "pa", "orders.create", true},
		{"no tenant: shared inbox", def, "", "_INBOX.abc", false},
		{"no tenant: no results", def, "", "embed.results.pb.doc-1", true},
		{"no tenant: no tenant inbox", def, "", "_INBOX_pb.x", true},
		{"bad tenant", def, "p*", "embed.results.p*.x", true},
		{"tenant with a dot", def, "a.b", "embed.results.a.b.x", true},
		{"kv poisoning", def, "run", "$KV.EMBED_ENGINES.bge-m3_abc.cpu.b1000000000000000.s8192", true},
		{"js api", def, "run", "$JS.API.STREAM.DELETE.EMBED_JOBS", true},
		{"system", def, "run", "$SYS.REQ.SERVER.PING", true},
		{"forged dead letter", def, "run", "embed.dlq.x", true},
		{"requeued job", def, "run", "embed.jobs.run", true},
		{"service", def, "run", "embed.v1.embed", true},
		{"too long", def, "x", "embed.results.x." + strings.Repeat("x", 241), true},
		{"at the limit", def, "x", "embed.results.x." + strings.Repeat("x", 240), false},
		{"5 KB", def, "x", "embed.results.x." + strings.Repeat("x", 5000), true},
		{"wildcard", def, "x", "embed.results.x.>", true},
		{"star", def, "x", "embed.results.x.*", true},
		{"star inside a token", def, "x", "embed.results.x.a*b", true},
		{"empty token", def, "x", "embed.results.x..a", true},
		{"trailing dot", def, "x", "embed.results.x.a.", true},
		{"space", def, "x", "embed.results.x.a b", true},
		{"tab", def, "x", "embed.results.x.a\tb", true},
		{"newline", def, "x", "embed.results.x.a\r\nPUB x 1", true},
		{"nul", def, "x", "embed.results.x.a\x00", true},
		{"del", def, "x", "embed.results.x.a\x7f", true},
		{"unicode space", def, "x", "embed.results.x.a\u00a0b", true},
		{"C1 control", def, "x", "embed.results.x.a\u0085b", true},
		{"invalid utf-8", def, "x", "embed.results.x.\xff", true},
		{"off: any results", off, "", "embed.results.run.job-1", false},
		{"off: shared inbox", off, "", "_INBOX.abc", false},
		{"off: tenant inbox", off, "", "_INBOX_pa.abc", true},
		{"off: elsewhere", off, "", "orders.delete", true},
		{"off: results root", off, "", "embed.results", true},
		{"custom star", custom, "pa", "results.run.done", false},
		{"custom star two tokens", custom, "pa", "results.a.b.done", true},
		{"custom rest", custom, "pa", "replies.x.y", false},
		{"custom deny wins", custom, "pa", "replies.admin.x", true},
		{"custom tenant pattern", custom, "pa", "audit.pa.x", false},
		{"custom tenant pattern, another tenant", custom, "pa", "audit.pb.x", true},
		{"custom tenant inside a token", custom, "pa", "xpay.1", false},
		{"custom tenant pattern without a tenant", custom, "", "audit.pa.x", true},
		{"custom literal placeholder", custom, "pa", "audit.{tenant}.x", true},
		{"custom keeps the space", custom, "pa", "embed.results.pa.a", false},
		{"custom length", custom, "pa", "replies." + strings.Repeat("y", 30), true},
		{"moved space", moved, "pa", "out.pa.1", false},
		{"moved inbox", moved, "pa", "_IN_pa.1", false},
		{"moved: old space", moved, "pa", "embed.results.pa.1", true},
		{"dollar even when allowed", ReplyPolicy{Allow: []string{">"}}, "pa", "$KV.X.y", true},
		{"deny even when allowed", ReplyPolicy{Allow: []string{">"}}, "pa", "embed.dlq.bad_payload", true},
		{"deny even in the space", ReplyPolicy{Deny: []string{"embed.results.pa.admin.>"}}, "pa", "embed.results.pa.admin.x", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Check(c.tenant, c.reply)
			if (err != nil) != c.refuse {
				t.Fatalf("Check(%q, %q) = %v, want refused %v", c.tenant, c.reply, err, c.refuse)
			}
			if err == nil {
				return
			}
			if err.Code != CodeBadReply || err.Retriable {
				t.Errorf("Check(%q) = %+v, want non-retriable bad_reply", c.reply, err)
			}
			if len(err.Message) > 300 {
				t.Errorf("message of %d bytes: a refused subject must not make it long", len(err.Message))
			}
		})
	}
}

func TestReplyPolicyUnscoped(t *testing.T) {
	p := ReplyPolicy{Allow: []string{"audit.{tenant}.>", "shared.>"}}
	if got := p.Unscoped(); len(got) != 1 || got[0] != "shared.>" {
		t.Errorf("Unscoped = %q", got)
	}
}

func TestMatchSubject(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.b.>", "x.b.y", true},
		{"*.b.>", "x.c.y", false},
		{"embed.results.>", "embed.resultsx.a", false},
	} {
		if got := MatchSubject(c.pattern, c.subject); got != c.want {
			t.Errorf("MatchSubject(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

func TestValidPattern(t *testing.T) {
	for s, want := range map[string]bool{
		"embed.results.>": true, "_INBOX.>": true, "a.*.b": true, ">": true, "*": true, "a": true,
		"": false, "a.>.b": false, "a..b": false, "a.": false, ".a": false, "a b": false, "a*": false, "a.b>": false, "\xff": false,
	} {
		if got := ValidPattern(s); got != want {
			t.Errorf("ValidPattern(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestParsePatterns(t *testing.T) {
	got, err := ParsePatterns(" embed.results.> , _INBOX.>,,")
	if err != nil || len(got) != 2 || got[0] != "embed.results.>" || got[1] != "_INBOX.>" {
		t.Errorf("ParsePatterns = %q, %v", got, err)
	}
	if got, err := ParsePatterns(""); err != nil || got != nil {
		t.Errorf("ParsePatterns(\"\") = %q, %v; want nil (the default)", got, err)
	}
	if _, err := ParsePatterns("a.>,b..c"); err == nil {
		t.Error("ParsePatterns accepted an empty token")
	}
}

func TestReplyPolicyValidate(t *testing.T) {
	if err := (ReplyPolicy{}).WithDefaults().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	if err := (ReplyPolicy{Allow: []string{"audit.{tenant}.>", "x{tenant}.*"}}).Validate(); err != nil {
		t.Errorf("tenant patterns: %v", err)
	}
	for _, p := range []ReplyPolicy{
		{MaxBytes: MaxReplyBytesCeiling + 1},
		{Allow: []string{"$KV.>"}},
		{Allow: []string{"a..b"}},
		{Allow: []string{"a.{tenant}>"}},
		{Deny: []string{"a.>.b"}},
		{Tenancy: Tenancy{Token: -1}},
		{Tenancy: Tenancy{ResultsPrefix: "a.>"}},
		{Tenancy: Tenancy{ResultsPrefix: "$KV.x"}},
		{Tenancy: Tenancy{InboxPrefix: "_IN.x_"}},
		{Tenancy: Tenancy{InboxPrefix: "a b"}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", p)
		}
	}
}

func FuzzReplyPolicyCheck(f *testing.F) {
	for _, s := range []string{"embed.results.a", "_INBOX.x", "$KV.a.b", "a.>", "a..b", "embed.dlq.x", "\xff", "a b"} {
		f.Add(s)
	}
	var p ReplyPolicy
	f.Fuzz(func(t *testing.T, reply string) {
		err := p.Check("pa", reply)
		if err == nil && (len(reply) > DefaultMaxReplyBytes || !LiteralSubject(reply) || strings.HasPrefix(reply, "$") ||
			!(MatchSubject("embed.results.pa.>", reply) || MatchSubject("_INBOX_pa.>", reply))) {
			t.Fatalf("Check(pa, %q) allowed it", reply)
		}
		if err != nil && len(err.Message) > 200 {
			t.Fatalf("Check(%q): message of %d bytes", reply, len(err.Message))
		}
	})
}
