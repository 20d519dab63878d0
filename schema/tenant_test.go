package schema

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestTenancyJobTenant(t *testing.T) {
	for _, c := range []struct {
		ty      Tenancy
		subject string
		tenant  string
		ok      bool
	}{
		{Tenancy{}, "embed.jobs.producer-a", "producer-a", true},
		{Tenancy{}, "embed.jobs.producer-a.run.doc-1", "producer-a", true},
		{Tenancy{}, "embed.jobs", "", false},
		{Tenancy{}, "embed.jobs.a*b.x", "", false},
		{Tenancy{Token: 4}, "jobs.eu.west.t1.x", "t1", true},
		{Tenancy{Token: 1}, "t1.x", "t1", true},
		{Tenancy{Off: true}, "embed.jobs.producer-a", "", true},
		// A tenant must fit a usage event: at most MaxTenantBytes.
		{Tenancy{}, "embed.jobs." + strings.Repeat("t", MaxTenantBytes) + ".x", strings.Repeat("t", MaxTenantBytes), true},
		{Tenancy{}, "embed.jobs." + strings.Repeat("t", MaxTenantBytes+1) + ".x", "", false},
	} {
		tenant, ok := c.ty.JobTenant(c.subject)
		if tenant != c.tenant && ok || ok != c.ok {
			t.Errorf("%+v.JobTenant(%q) = %q, %v; want %q, %v", c.ty, c.subject, tenant, ok, c.tenant, c.ok)
		}
	}
}

func TestTenancySpace(t *testing.T) {
	for _, c := range []struct {
		ty     Tenancy
		tenant string
		want   []string
	}{
		{Tenancy{}, "pa", []string{"embed.results.pa.>", "_INBOX_pa.>"}},
		{Tenancy{}, "", []string{"_INBOX.>"}},
		{Tenancy{Off: true}, "", []string{"embed.results.>", "_INBOX.>"}},
		{Tenancy{ResultsPrefix: "r", InboxPrefix: "in-"}, "pa", []string{"r.pa.>", "in-pa.>"}},
	} {
		if got := c.ty.Space(c.tenant); !slices.Equal(got, c.want) {
			t.Errorf("%+v.Space(%q) = %q, want %q", c.ty, c.tenant, got, c.want)
		}
	}
}

func TestTenancyCheckJobSubjects(t *testing.T) {
	var def Tenancy
	for pats, ok := range map[string]bool{
		"embed.jobs.>":   true,
		"embed.jobs.*.>": true,
		"embed.jobs.*":   true,
		"embed.>":        false, // embed.x has no third token
		"embed.jobs":     false,
		"jobs.>":         false,
	} {
		if err := def.CheckJobSubjects([]string{pats}); (err == nil) != ok {
			t.Errorf("CheckJobSubjects(%q) = %v, want ok %v", pats, err, ok)
		}
	}
	if err := (Tenancy{Off: true}).CheckJobSubjects([]string{"jobs"}); err != nil {
		t.Errorf("tenancy off checks subjects: %v", err)
	}
}

func TestSubjectToken(t *testing.T) {
	for _, c := range []struct {
		s    string
		pos  int
		want string
	}{
		{"a.b.c", 1, "a"}, {"a.b.c", 3, "c"}, {"a.b.c", 4, ""}, {"a.b.c", 0, ""}, {"", 1, ""},
	} {
		if got := SubjectToken(c.s, c.pos); got != c.want {
			t.Errorf("SubjectToken(%q, %d) = %q, want %q", c.s, c.pos, got, c.want)
		}
	}
}

func TestSealBlob(t *testing.T) {
	key, err := NewBlobKey()
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("a whole encoded result, vectors and all")
	sealed, err := SealBlob(key, "r2-abc", slices.Clone(plain))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain[:16]) || len(sealed) != len(plain)+16 {
		t.Fatalf("sealed object of %d bytes shows the result", len(sealed))
	}
	got, err := OpenBlob(key, "r2-abc", slices.Clone(sealed))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("OpenBlob = %q, %v", got, err)
	}
	other, _ := NewBlobKey()
	flipped := slices.Clone(sealed)
	flipped[3] ^= 1
	for name, c := range map[string]struct {
		key    []byte
		name   string
		sealed []byte
	}{
		"other key":    {other, "r2-abc", sealed},
		"other name":   {key, "r2-abd", sealed},
		"changed byte": {key, "r2-abc", flipped},
		"short key":    {key[:16], "r2-abc", sealed},
		"truncated":    {key, "r2-abc", sealed[:10]},
	} {
		if _, err := OpenBlob(c.key, c.name, slices.Clone(c.sealed)); !errors.Is(err, ErrBlobSeal) {
			t.Errorf("%s: OpenBlob = %v, want ErrBlobSeal", name, err)
		}
	}
}

func TestBlobKeyRoundTrip(t *testing.T) {
	key, _ := NewBlobKey()
	res := &Result{V: 1, ID: "j", Blob: &Blob{Name: "r2-x", Size: 10, Digest: "SHA-256=abc", Key: key}}
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		data, err := EncodeResult(res, enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResult(data, enc)
		if err != nil || got.Blob == nil || !bytes.Equal(got.Blob.Key, key) || got.Blob.Name != "r2-x" {
			t.Errorf("%s: blob round trip = %+v, %v", enc, got.Blob, err)
		}
	}
}

// TestTenancyAccountsRoutedReplies: with tenants as accounts a tenant's
// space also holds the server's routed replies (_R_.>), never without a
// tenant or in the one-account layout.
func TestTenancyAccountsRoutedReplies(t *testing.T) {
	acc := ReplyPolicy{Tenancy: Tenancy{Accounts: true}}
	one := ReplyPolicy{}
	for _, c := range []struct {
		p      ReplyPolicy
		tenant string
		ok     bool
	}{{acc, "acme", true}, {acc, "", false}, {one, "acme", false}, {one, "", false}} {
		if got := c.p.Check(c.tenant, "_R_.abc.def") == nil; got != c.ok {
			t.Errorf("accounts=%v tenant %q: routed reply allowed %v, want %v", c.p.Tenancy.Accounts, c.tenant, got, c.ok)
		}
	}
	if acc.Check("acme", "_INBOX_other.x") == nil {
		t.Error("another tenant's inbox allowed with tenants as accounts")
	}
}

func TestResultsConsumerName(t *testing.T) {
	if got := ResultsConsumerName("producer-a", 3); got != "producer-a_r3" {
		t.Errorf("got %q", got)
	}
}
