package faults

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// realTokens is what the tiny model's tokenizer makes of every text of the
// run, special tokens included: the tokens a job's usage must count.
func (b *bulk) realTokens(t *testing.T, tok *tokenizer.Tokenizer) (texts, tokens int64) {
	t.Helper()
	for i := range b.ids {
		for k := range 1 + i%3 {
			ids, _ := tok.EncodeIDs(bulkText(i, k), 0)
			tokens += int64(len(ids))
			texts++
		}
	}
	return texts, tokens
}

// TestUsageExactAfterKill: two tenants' runs, serve SIGKILLed in the
// middle and started again, every held job redelivered; the usage stream
// then holds one event per job, and each tenant's usage is exactly the
// jobs, texts and real tokens of its texts (counted by the tokenizer, not
// read from the results), with nothing failed. `jetembed usage` prints
// the same.
func TestUsageExactAfterKill(t *testing.T) {
	bin := binary(t)
	srv := natstest.RunServer(t)
	cfg := faultConfig(1, 2*time.Second)
	runs := []*bulk{newBulk(t, srv.ClientURL(), cfg, "meter-a"), newBulk(t, srv.ClientURL(), cfg, "meter-b")}
	runs[0].submit(1500)
	runs[1].submit(500)
	all := len(runs[0].ids) + len(runs[1].ids)

	a := startServe(t, serveArgs(t, srv.ClientURL(), cfg)...)
	runs[0].waitResults(all/4, 60*time.Second)
	done, err := runs[0].count(cfg.Results.Name)
	if err != nil {
		t.Fatal(err)
	}
	if done >= uint64(all) {
		t.Fatalf("the run finished (%d results) before the kill: nothing was in flight", done)
	}
	held, err := runs[0].consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	a.Kill()
	t.Logf("SIGKILL with %d/%d results stored and %d jobs ack-pending", done, all, held.NumAckPending)

	startServe(t, serveArgs(t, srv.ClientURL(), cfg)...)
	runs[0].waitResults(all, 90*time.Second)
	for _, r := range runs {
		r.verify() // one result a job, and the work queue empty: every job ACKed
	}
	if after, err := runs[0].consumerInfo(); err != nil {
		t.Fatal(err)
	} else if after.Delivered.Consumer <= uint64(all) {
		t.Fatalf("%d deliveries for %d jobs: nothing was redelivered after the kill", after.Delivered.Consumer, all)
	}

	tok, err := tokenizer.Load(filepath.Join(tinyModel(t), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := jetstream.ReadUsage(ctx, runs[0].js, jetstream.UsageQuery{Total: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != int64(all) || rep.Skipped != 0 {
		t.Errorf("usage stream: %d events (%d skipped) for %d jobs: a job counted twice or not at all", rep.Events, rep.Skipped, all)
	}
	if n, err := runs[0].count(cfg.Usage.Name); err != nil || n != uint64(all) {
		t.Errorf("usage stream stores %d events for %d jobs (%v)", n, all, err)
	}
	got := map[string]jetstream.UsageRow{}
	for _, r := range rep.Rows {
		got[r.Tenant] = r
	}
	if len(got) != len(runs) {
		t.Errorf("usage of tenants %v, want %d tenants", rep.Rows, len(runs))
	}
	for _, r := range runs {
		texts, tokens := r.realTokens(t, tok)
		u := got[r.run]
		if u.Jobs != int64(len(r.ids)) || u.Texts != texts || u.Tokens != tokens || len(u.Failed) != 0 {
			t.Errorf("tenant %s: %d jobs, %d texts, %d tokens, failed %v; want %d jobs, %d texts, %d tokens, none failed",
				r.run, u.Jobs, u.Texts, u.Tokens, u.Failed, len(r.ids), texts, tokens)
		}
		if u.PaddedTokens < u.Tokens || u.ComputeSeconds <= 0 {
			t.Errorf("tenant %s: %d padded tokens for %d real, %v compute seconds", r.run, u.PaddedTokens, u.Tokens, u.ComputeSeconds)
		}
		t.Logf("tenant %s: %d jobs, %d texts, %d tokens, %d padded, %.3f compute s", r.run, u.Jobs, u.Texts, u.Tokens, u.PaddedTokens, u.ComputeSeconds)
	}

	// The command prints the same sums.
	out, err := exec.Command(bin, "usage", "--nats", srv.ClientURL(), "--total", "--json", "--tenant", "meter-b").Output()
	if err != nil {
		t.Fatalf("jetembed usage: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var row jetstream.UsageRow
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &row) != nil {
		t.Fatalf("jetembed usage --total --json --tenant meter-b printed %q, want one row", out)
	}
	if want := got["meter-b"]; row.Tenant != "meter-b" || row.Jobs != want.Jobs || row.Tokens != want.Tokens || row.Texts != want.Texts {
		t.Errorf("jetembed usage printed %+v, want %+v", row, want)
	}
}
