package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// poison is one kind of bad job: how to make its body and the error code its
// result and dead letter must name.
type poison struct {
	name string
	json bool
	body func(id, reply string) []byte
	code schema.Code
	// unanswerable: the job names a reply subject nothing can publish to,
	// so it only gets its dead letter.
	unanswerable bool
}

func jsonBody(format string) func(id, reply string) []byte {
	return func(id, _ string) []byte { return []byte(fmt.Sprintf(format, id)) }
}

func msgpackJob(edit func(j *schema.Job)) func(id, reply string) []byte {
	return func(id, _ string) []byte {
		j := schema.NewJob(id, "a text that would be fine")
		edit(j)
		data, err := schema.EncodeJob(j, schema.EncodingMsgpack)
		if err != nil {
			panic(err)
		}
		return data
	}
}

var poisons = []poison{
	{"garbage", false, func(string, string) []byte { return []byte("\xc1\xff not msgpack at all") }, schema.CodeBadPayload, false},
	{"truncated-msgpack", false, func(id, r string) []byte { return msgpackJob(func(*schema.Job) {})(id, r)[:9] }, schema.CodeBadPayload, false},
	{"truncated-json", true, jsonBody(`{"id":%q,"texts":["cut he`), schema.CodeBadPayload, false},
	{"version", true, jsonBody(`{"v":2,"id":%q,"texts":["x"]}`), schema.CodeBadVersion, false},
	{"empty", true, jsonBody(`{"id":%q,"texts":[]}`), schema.CodeEmptyJob, false},
	{"output", true, jsonBody(`{"id":%q,"texts":["x"],"outputs":["everything"]}`), schema.CodeUnknownOutput, false},
	{"too-many", false, msgpackJob(func(j *schema.Job) { j.Texts = make([]string, schema.DefaultMaxTexts+1) }), schema.CodeTooManyTexts, false},
	{"oversized", false, msgpackJob(func(j *schema.Job) { j.Texts = []string{strings.Repeat("big ", schema.DefaultMaxTextBytes/4+1)} }), schema.CodeJobTooLarge, false},
	{"utf8-id", false, msgpackJob(func(j *schema.Job) { j.ID += "\xff\xfe" }), schema.CodeBadPayload, false},
	{"bad-reply", true, jsonBody(`{"id":%q,"texts":["x"],"reply":"not a subject"}`), schema.CodeBadReply, true},
	{"kv-reply", true, jsonBody(`{"id":%q,"texts":["x"],"reply":"$KV.EMBED_ENGINES.m.cpu.b1000000000000000.s8192"}`), schema.CodeBadReply, true},
	{"long-reply", true, jsonBody(`{"id":%q,"texts":["x"],"reply":"embed.results.poison.` + strings.Repeat("x", 5000) + `"}`), schema.CodeBadReply, true},
	{"duplicate-key", true, jsonBody(`{"id":%q,"texts":["x"],"texts":["y"]}`), schema.CodeBadPayload, false},
}

// TestPoisonFlood queues good jobs with a tenth of poison mixed in, of every
// kind the consumer must refuse, and one good job in fifty carrying an invalid
// UTF-8 text (an item error, not a job error). Every good job completes, every
// bad one gets an error result naming its code and a dead letter and is
// TERMed (delivered once), and the serve process never restarts.
func TestPoisonFlood(t *testing.T) {
	binary(t)
	srv := natstest.RunServer(t)
	cfg := faultConfig(1, 5*time.Second)
	b := newBulk(t, srv.ClientURL(), cfg, "poison")
	subject := b.c.JobSubject("poison") // one subject for all: the test publishes raw

	const good = 1500
	badWant := map[string]schema.Code{} // reply subject -> code
	dlqWant := map[schema.Code]int{}
	utf8Jobs := map[string]bool{}
	published := 0 // messages that get a result
	unanswerable := 0
	for i := range good {
		id := fmt.Sprintf("poison-%05d", i)
		texts := []string{fmt.Sprintf("good job %d", i), "a second text"}
		if i%50 == 0 {
			texts[1] = "broken \xff\xfe text"
			utf8Jobs[id] = true
		}
		if _, err := b.c.Submit(context.Background(), schema.NewJob(id, texts...)); err != nil {
			t.Fatal(err)
		}
		b.ids = append(b.ids, id)
		b.texts[id] = len(texts)
		published++
		if i%10 == 5 {
			p := poisons[(i/10)%len(poisons)]
			badID := fmt.Sprintf("bad-%s-%05d", p.name, i)
			reply := b.c.ReplySubject(badID)
			h := nats.Header{schema.HeaderReply: {reply}, schema.HeaderMsgID: {badID}}
			if p.json {
				h.Set(schema.HeaderContentType, schema.MediaTypeJSON)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: p.body(badID, reply)})
			cancel()
			if err != nil {
				t.Fatalf("publish %s: %v", badID, err)
			}
			dlqWant[p.code]++
			if p.unanswerable {
				unanswerable++
				continue
			}
			badWant[reply] = p.code
			published++
		}
	}
	t.Logf("queued %d good jobs and %d poison jobs of %d kinds", good, len(badWant)+unanswerable, len(poisons))

	start := time.Now()
	s := startServe(t, serveArgs(t, srv.ClientURL(), cfg)...)
	pid := s.Cmd.Process.Pid
	b.waitResults(published, 60*time.Second)
	t.Logf("all %d results stored in %v", published, time.Since(start).Round(time.Millisecond))

	// Every bad job: one error result with its code at its reply subject.
	got := map[string]int{}
	for _, m := range storedMsgs(t, b.js, cfg.Results.Name, "embed.results.poison.>") {
		code, ok := badWant[m.Subject()]
		if !ok {
			continue
		}
		got[m.Subject()]++
		r, err := schema.DecodeResult(m.Data(), schema.EncodingFor(m.Headers().Get(schema.HeaderContentType)))
		if err != nil {
			t.Errorf("result on %s: %v", m.Subject(), err)
			continue
		}
		if r.Error == nil || r.Error.Code != code || r.Error.Retriable || len(r.Items) != 0 {
			t.Errorf("result on %s: error %v with %d items, want %s (final)", m.Subject(), r.Error, len(r.Items), code)
		}
	}
	for reply, code := range badWant {
		if got[reply] != 1 {
			t.Errorf("%s job replying to %s: %d results, want 1", code, reply, got[reply])
		}
	}

	// Every bad job: one dead letter naming the same code.
	dlq := map[schema.Code]int{}
	for _, m := range storedMsgs(t, b.js, cfg.DLQ.Name, "") {
		dlq[schema.Code(m.Headers().Get(jetstream.HeaderDLQCode))]++
	}
	for code, n := range dlqWant {
		if dlq[code] != n {
			t.Errorf("dead letters with code %s: %d, want %d", code, dlq[code], n)
		}
		delete(dlq, code)
	}
	if len(dlq) > 0 {
		t.Errorf("unexpected dead letters: %v", dlq)
	}
	t.Logf("dead letters by code: %v", dlqWant)

	// Good jobs: exactly one result each with vectors, except the invalid
	// UTF-8 text, which fails alone.
	b.texts = map[string]int{}
	for _, id := range b.ids {
		b.texts[id] = 2
	}
	checkUTF8Items(t, b, utf8Jobs)

	// TERMed, never redelivered: one delivery per message.
	if info, err := b.consumerInfo(); err != nil {
		t.Error(err)
	} else if info.Delivered.Consumer != uint64(published+unanswerable) {
		t.Errorf("%d deliveries for %d messages: a bad job came back", info.Delivered.Consumer, published+unanswerable)
	}
	if !s.Running() || s.Cmd.Process.Pid != pid {
		t.Errorf("serve exited during the flood: %v", s.Err())
	}
	if strings.Contains(s.Log.String(), "panic") {
		t.Errorf("serve logged a panic:\n%s", testkit.Tail(s.Log.String(), 20))
	}
}

// checkUTF8Items verifies the good jobs: one result each, and in the jobs
// holding an invalid UTF-8 text that item fails with invalid_utf8 while the
// other still has its vector.
func checkUTF8Items(t *testing.T, b *bulk, broken map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range storedMsgs(t, b.js, b.cfg.Results.Name, "embed.results.poison.>") {
		id := m.Headers().Get(schema.HeaderJobID)
		if _, good := b.texts[id]; !good {
			continue
		}
		seen[id]++
		r, err := schema.DecodeResult(m.Data(), schema.EncodingFor(m.Headers().Get(schema.HeaderContentType)))
		if err != nil || r.Error != nil || len(r.Items) != 2 {
			t.Errorf("job %s: %v %+v", id, err, r)
			continue
		}
		first, second := r.Items[0], r.Items[1]
		if first.Error != nil || len(first.Dense) == 0 {
			t.Errorf("job %s item 0: error %v, %d dense values", id, first.Error, len(first.Dense))
		}
		switch {
		case broken[id] && (second.Error == nil || second.Error.Code != schema.CodeInvalidUTF8):
			t.Errorf("job %s item 1 (invalid UTF-8): error %v, want %s", id, second.Error, schema.CodeInvalidUTF8)
		case !broken[id] && (second.Error != nil || len(second.Dense) == 0):
			t.Errorf("job %s item 1: error %v, %d dense values", id, second.Error, len(second.Dense))
		}
	}
	for _, id := range b.ids {
		if seen[id] != 1 {
			t.Errorf("job %s: %d results, want 1", id, seen[id])
		}
	}
}
