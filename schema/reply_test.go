package schema

import (
	"strings"
	"testing"
)

func TestReplyPolicyCheck(t *testing.T) {
	var def ReplyPolicy
	custom := ReplyPolicy{Allow: []string{"results.*.done", "replies.>"}, Deny: []string{"replies.admin.>"}, MaxBytes: 32}
	for _, c := range []struct {
		name   string
		p      ReplyPolicy
		reply  string
		refuse bool
	}{
		{"results subject", def, "embed.results.run.job-1", false},
		{"request inbox", def, "_INBOX.abc.def", false},
		{"utf-8 token", def, "embed.results.é.1", false},
		{"kv poisoning", def, "$KV.EMBED_ENGINES.bge-m3_abc.cpu.b1000000000000000.s8192", true},
		{"js api", def, "$JS.API.STREAM.DELETE.EMBED_JOBS", true},
		{"system", def, "$SYS.REQ.SERVER.PING", true},
		{"forged dead letter", def, "embed.dlq.x", true},
		{"requeued job", def, "embed.jobs.run", true},
		{"service", def, "embed.v1.embed", true},
		{"outside the allow-list", def, "orders.delete", true},
		{"allow root itself", def, "embed.results", true},
		{"too long", def, "embed.results." + strings.Repeat("x", 243), true},
		{"at the limit", def, "embed.results." + strings.Repeat("x", 242), false},
		{"5 KB", def, "embed.results." + strings.Repeat("x", 5000), true},
		{"wildcard", def, "embed.results.>", true},
		{"star", def, "embed.results.*", true},
		{"star inside a token", def, "embed.results.a*b", true},
		{"empty token", def, "embed.results..a", true},
		{"leading dot", def, ".embed.results.a", true},
		{"trailing dot", def, "embed.results.a.", true},
		{"space", def, "embed.results.a b", true},
		{"tab", def, "embed.results.a\tb", true},
		{"newline", def, "embed.results.a\r\nPUB x 1", true},
		{"nul", def, "embed.results.a\x00", true},
		{"del", def, "embed.results.a\x7f", true},
		{"unicode space", def, "embed.results.a\u00a0b", true},
		{"C1 control", def, "embed.results.a\u0085b", true},
		{"invalid utf-8", def, "embed.results.\xff", true},
		{"custom star", custom, "results.run.done", false},
		{"custom star two tokens", custom, "results.a.b.done", true},
		{"custom rest", custom, "replies.x.y", false},
		{"custom deny wins", custom, "replies.admin.x", true},
		{"custom default no longer allowed", custom, "embed.results.a", true},
		{"custom length", custom, "replies." + strings.Repeat("y", 30), true},
		{"dollar even when allowed", ReplyPolicy{Allow: []string{">"}}, "$KV.X.y", true},
		{"deny even when allowed", ReplyPolicy{Allow: []string{">"}}, "embed.dlq.bad_payload", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Check(c.reply)
			if (err != nil) != c.refuse {
				t.Fatalf("Check(%q) = %v, want refused %v", c.reply, err, c.refuse)
			}
			if err == nil {
				return
			}
			if err.Code != CodeBadReply || err.Retriable {
				t.Errorf("Check(%q) = %+v, want non-retriable bad_reply", c.reply, err)
			}
			if len(err.Message) > 200 {
				t.Errorf("message of %d bytes: a refused subject must not make it long", len(err.Message))
			}
		})
	}
}

func TestReplyPolicyCheckInbox(t *testing.T) {
	var p ReplyPolicy
	for reply, ok := range map[string]bool{
		"_INBOX.abc":                         true,
		"_INBOX_producer-a.abc":              true, // a custom prefix: not in the allow-list
		"$KV.EMBED_ENGINES.x":                false,
		"embed.v1.embed":                     false,
		"embed.dlq.x":                        false,
		"a.>":                                false,
		"_INBOX." + strings.Repeat("x", 300): false,
	} {
		if err := p.CheckInbox(reply); (err == nil) != ok {
			t.Errorf("CheckInbox(%q) = %v, want allowed %v", reply, err, ok)
		}
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
	for _, p := range []ReplyPolicy{
		{MaxBytes: MaxReplyBytesCeiling + 1},
		{Allow: []string{"$KV.>"}},
		{Allow: []string{"a..b"}},
		{Deny: []string{"a.>.b"}},
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
		err := p.Check(reply)
		if err == nil && (len(reply) > DefaultMaxReplyBytes || !LiteralSubject(reply) || strings.HasPrefix(reply, "$") ||
			!(MatchSubject("embed.results.>", reply) || MatchSubject("_INBOX.>", reply))) {
			t.Fatalf("Check(%q) allowed it", reply)
		}
		if err != nil && len(err.Message) > 200 {
			t.Fatalf("Check(%q): message of %d bytes", reply, len(err.Message))
		}
	})
}
