package consumer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jetembed/jetembed/schema"
)

// fakeBlobs records the blobs stored; fail injects an error.
type fakeBlobs struct {
	mu    sync.Mutex
	blobs map[string][]byte
	fail  error
}

func (b *fakeBlobs) PutBlob(_ context.Context, name string, _ map[string][]string, data []byte) (schema.Blob, error) {
	if b.fail != nil {
		return schema.Blob{}, b.fail
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blobs == nil {
		b.blobs = map[string][]byte{}
	}
	b.blobs[name] = slices.Clone(data)
	return schema.Blob{Name: name, Size: int64(len(data)), Digest: "SHA-256=x"}, nil
}

// bigJob asks for ColBERT of a long text: about 13 bytes a character in
// the fake embedder's result, far over the 4 KiB test limit.
func bigJob(id string) *schema.Job {
	j := schema.NewJob(id, strings.Repeat("a", 2000))
	j.Outputs = []schema.Output{schema.OutputColBERT}
	j.Reply = "embed.results.run." + id
	return j
}

// TestResultTooLargeWithoutBlobs: with no blob store, an oversized result
// is answered result_too_large, dead-lettered and TERMed on the first
// delivery; it is never NAKed to be embedded again.
func TestResultTooLargeWithoutBlobs(t *testing.T) {
	pub := &fakePub{maxPayload: 4096}
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, pub)
	if got := r.submit(t, bigJob("big"), schema.EncodingMsgpack); !slices.Equal(got, []string{"term"}) {
		t.Fatalf("calls %v, want [term]", got)
	}
	res, p := r.resultFor(t, "big")
	if res.Error == nil || res.Error.Code != schema.CodeResultTooLarge || res.Error.Retriable {
		t.Fatalf("result error %+v, want result_too_large, not retriable", res.Error)
	}
	if !strings.Contains(res.Error.Message, "4096") {
		t.Errorf("message %q does not name the limit", res.Error.Message)
	}
	if got := p.header[schema.HeaderErrorCode]; !slices.Equal(got, []string{string(schema.CodeResultTooLarge)}) {
		t.Errorf("error code header %v", got)
	}
	if dlq := pub.DLQ(); len(dlq) != 1 || dlq[0].Code != string(schema.CodeResultTooLarge) {
		t.Errorf("dlq %+v", dlq)
	}
	if ev := pub.Events(); !slices.Equal(ev, []string{"dlq", "result"}) {
		t.Errorf("events %v, want the dead letter before the result", ev)
	}
}

// TestResultTooLargeToBlob: with a blob store, the whole result is stored
// sealed, under a name derived from the tenant, reply and id, and the reply
// is a small result naming it with the key; the job is ACKed. A result that
// fits is sent as it is.
func TestResultTooLargeToBlob(t *testing.T) {
	for _, enc := range []schema.Encoding{schema.EncodingMsgpack, schema.EncodingJSON} {
		t.Run(enc.String(), func(t *testing.T) {
			pub, blobs := &fakePub{maxPayload: 4096}, &fakeBlobs{}
			r := newRig(t, Config{Blobs: blobs}, nil, pub)
			j := bigJob("big")
			if got := r.submit(t, j, enc); !slices.Equal(got, []string{"ack"}) {
				t.Fatalf("calls %v, want [ack]", got)
			}
			res, p := r.resultFor(t, "big")
			prefix := schema.ResultMsgID(testTenant, j.Reply, j.ID) + "-"
			if res.Blob == nil || !strings.HasPrefix(res.Blob.Name, prefix) || len(res.Items) != 0 || res.Error != nil {
				t.Fatalf("result %+v, want a blob reference to %s...", res, prefix)
			}
			name := res.Blob.Name
			if len(p.data) > 4096 {
				t.Errorf("reference result is %d bytes", len(p.data))
			}
			if _, err := schema.DecodeResult(blobs.blobs[name], enc); err == nil {
				t.Error("the stored blob decodes without its key")
			}
			plain, err := schema.OpenBlob(res.Blob.Key, name, slices.Clone(blobs.blobs[name]))
			if err != nil {
				t.Fatal(err)
			}
			full, err := schema.DecodeResult(plain, enc)
			if err != nil {
				t.Fatal(err)
			}
			if len(full.Items) != 1 || len(full.Items[0].ColBERT) != 2000 || res.Blob.Size != int64(len(blobs.blobs[name])) {
				t.Errorf("blob holds %d items, size %d", len(full.Items), res.Blob.Size)
			}
			small := schema.NewJob("small", "fits")
			small.Reply = "embed.results.run.small"
			r.submit(t, small, enc)
			if res, _ := r.resultFor(t, "small"); res.Blob != nil || len(res.Items) != 1 {
				t.Errorf("small result %+v", res)
			}
			if len(blobs.blobs) != 1 {
				t.Errorf("%d blobs stored, want 1", len(blobs.blobs))
			}
		})
	}
}

// TestBlobNeverReplaced: a redelivered job stores a new blob under a new
// key, so the reference of its first attempt (already stored in the
// results stream, where the second is a duplicate) still opens; and two
// tenants' jobs naming the same reply and id never share a blob.
func TestBlobNeverReplaced(t *testing.T) {
	pub, blobs := &fakePub{maxPayload: 4096}, &fakeBlobs{}
	r := newRig(t, Config{Blobs: blobs}, nil, pub)
	var refs []*schema.Blob
	for i, subject := range []string{"embed.jobs." + testTenant, "embed.jobs." + testTenant, "embed.jobs.other"} {
		d, m := delivery(t, bigJob("big"), schema.EncodingMsgpack, uint64(i+1))
		d.Subject = subject
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		m.wait(t)
		res, err := schema.DecodeResult(pub.Results()[i].data, schema.EncodingMsgpack)
		if err != nil || res.Blob == nil {
			t.Fatalf("attempt %d: %+v, %v", i, res, err)
		}
		refs = append(refs, res.Blob)
	}
	if len(blobs.blobs) != 3 || refs[0].Name == refs[1].Name || string(refs[0].Key) == string(refs[1].Key) {
		t.Fatalf("blobs %d, names %s %s: a redelivery replaced a blob", len(blobs.blobs), refs[0].Name, refs[1].Name)
	}
	if a, b := refs[0].Name[:strings.LastIndex(refs[0].Name, "-")], refs[2].Name[:strings.LastIndex(refs[2].Name, "-")]; a == b {
		t.Errorf("two tenants' jobs share the blob identity %s", a)
	}
	for i, ref := range refs {
		if _, err := schema.OpenBlob(ref.Key, ref.Name, slices.Clone(blobs.blobs[ref.Name])); err != nil {
			t.Errorf("attempt %d: its blob does not open: %v", i, err)
		}
	}
}

// TestBlobStoreFailure: a blob that cannot be stored is a publish failure:
// NAK with backoff, the job runs again.
func TestBlobStoreFailure(t *testing.T) {
	pub := &fakePub{maxPayload: 4096}
	r := newRig(t, Config{Blobs: &fakeBlobs{fail: errInjected}, Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, pub)
	if got := r.submit(t, bigJob("big"), schema.EncodingMsgpack); !slices.Equal(got, []string{"nak+delay"}) {
		t.Fatalf("calls %v, want [nak+delay]", got)
	}
	if len(pub.Results()) != 0 || len(pub.DLQ()) != 0 {
		t.Errorf("results %d, dlq %d", len(pub.Results()), len(pub.DLQ()))
	}
}

// TestPublishDenied: a result the server refuses to route (permissions) is
// dead-lettered publish_denied and TERMed on the first delivery, never
// ACKed as a success nor retried.
func TestPublishDenied(t *testing.T) {
	pub := &fakePub{fail: func(s string) error { return fmt.Errorf("result to %s: %w", s, ErrPublishDenied) }}
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, pub)
	j := schema.NewJob("denied", "text")
	j.Reply = "_INBOX.elsewhere"
	if got := r.submit(t, j, schema.EncodingMsgpack); !slices.Equal(got, []string{"term"}) {
		t.Fatalf("calls %v, want [term]", got)
	}
	dlq := pub.DLQ()
	if len(dlq) != 1 || dlq[0].Code != ReasonPublishDenied || dlq[0].JobID != "denied" || !strings.Contains(dlq[0].Message, j.Reply) {
		t.Errorf("dlq %+v", dlq)
	}
	if r.met.get("term publish_denied") != 1 {
		t.Errorf("metrics %v", r.met)
	}
	if !strings.Contains(r.log.String(), `"job":"denied"`) {
		t.Errorf("log does not name the job: %s", r.log.String())
	}
}
