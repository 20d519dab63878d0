package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/jetstream/jstest"
	"github.com/jetembed/jetembed/schema"
)

// TestUsageRotatedKey: with --tenant-names, a tenant under two keys (JWT
// mode's key rotation: both lines of tenants.tsv name it) is one tenant:
// --tenant NAME reads the events of both keys, and every report sums them
// under the name, an hour at a time. Before, --tenant took one of the keys
// at random and the report had two rows of the name.
func TestUsageRotatedKey(t *testing.T) {
	srv := jstest.Provisioned(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const oldKey, newKey, other = "AOLDKEY", "ANEWKEY", "AOTHER"
	for tenant, jobs := range map[string]int{oldKey: 3, newKey: 5, other: 2} {
		for range jobs {
			ev, err := schema.EncodeUsageEvent(schema.UsageEvent{V: schema.UsageVersion, Tenant: tenant, Texts: 2, Tokens: 7})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.JS.Publish(ctx, schema.UsageSubject("embed.usage", tenant), ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	names := filepath.Join(t.TempDir(), "tenants.tsv")
	if err := os.WriteFile(names, []byte(oldKey+"\tacme\n"+newKey+"\tacme\n"+other+"\tglobex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Hour   string `json:"hour"`
		Tenant string `json:"tenant"`
		Jobs   int64  `json:"jobs"`
		Tokens int64  `json:"tokens"`
	}
	read := func(args ...string) []row {
		t.Helper()
		code, out, errOut := runCmd(t, ctx, append([]string{"usage", "--nats", srv.URL, "--json", "--tenant-names", names}, args...)...)
		if code != 0 {
			t.Fatalf("usage %v: exit %d: %s", args, code, errOut)
		}
		var rows []row
		for line := range strings.Lines(out) {
			var r row
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("usage %v: %q: %v", args, line, err)
			}
			rows = append(rows, r)
		}
		return rows
	}
	for range 5 { // a map order would show within a few runs
		if rows := read("--total", "--tenant", "acme"); len(rows) != 1 || rows[0].Tenant != "acme" || rows[0].Jobs != 8 || rows[0].Tokens != 56 {
			t.Fatalf("usage --tenant acme: %+v, want one row of acme: 8 jobs, 56 tokens", rows)
		}
	}
	if rows := read("--total"); len(rows) != 2 || rows[0].Tenant != "acme" || rows[0].Jobs != 8 || rows[1].Tenant != "globex" || rows[1].Jobs != 2 {
		t.Errorf("usage --total: %+v, want acme 8 and globex 2", rows)
	}
	// Hourly: one row a name and hour (the events may straddle an hour).
	seen, acme := map[[2]string]bool{}, int64(0)
	for _, r := range read() {
		if k := [2]string{r.Hour, r.Tenant}; r.Hour == "" || seen[k] {
			t.Errorf("usage (hourly): a second row of %s at %q", r.Tenant, r.Hour)
		} else {
			seen[k] = true
		}
		if r.Tenant == "acme" {
			acme += r.Jobs
		}
	}
	if acme != 8 {
		t.Errorf("usage (hourly): %d jobs of acme, want 8", acme)
	}
}
