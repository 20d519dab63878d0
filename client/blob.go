package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/schema"
)

// blobBucket is the blobs Object Store, read through direct gets of its
// stream (OBJ_<bucket>): the object's meta message, then its chunks. A
// direct get needs one read-only grant and no consumer: a producer allowed
// to create consumers on the bucket's stream could have it deliver chunks
// to any subject.
type blobBucket struct {
	name string
}

// directGet is a JetStream direct get request.
type directGet struct {
	Seq        uint64 `json:"seq,omitempty"`
	NextBySubj string `json:"next_by_subj,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
}

// get returns the message a direct get on the bucket's stream finds, its
// subject and sequence.
func (c *Client) get(ctx context.Context, req directGet) (*nats.Msg, uint64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	m, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.OBJ_"+c.blobs.name, body)
	if err != nil {
		return nil, 0, err
	}
	if st := m.Header.Get("Status"); st != "" {
		return nil, 0, fmt.Errorf("direct get: status %s %s", st, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("direct get: no sequence in the answer")
	}
	return m, seq, nil
}

// resolve replaces a result that names a blob by the whole result stored
// in it, checking size, digest and id against the reference and opening
// it with the reference's key.
func (c *Client) resolve(ctx context.Context, ref *schema.Result, enc schema.Encoding) (*schema.Result, error) {
	b := ref.Blob
	fail := func(format string, args ...any) (*schema.Result, error) {
		return nil, fmt.Errorf("%w: job %q, blob %s: %s", ErrBlob, ref.ID, b.Name, fmt.Sprintf(format, args...))
	}
	if b.Size < 0 || b.Size > c.o.maxBlobBytes {
		return fail("size %d over the client's limit of %d bytes", b.Size, c.o.maxBlobBytes)
	}
	m, _, err := c.get(ctx, directGet{LastBySubj: "$O." + c.blobs.name + ".M." + base64.URLEncoding.EncodeToString([]byte(b.Name))})
	if err != nil {
		return fail("%v", err)
	}
	var info natsjs.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return fail("object info: %v", err)
	}
	if info.Deleted || int64(info.Size) != b.Size || info.Digest != b.Digest || info.NUID == "" {
		return fail("stored object is %d bytes %s, the reference says %d bytes %s", info.Size, info.Digest, b.Size, b.Digest)
	}
	data := make([]byte, 0, b.Size)
	h := sha256.New()
	chunks := "$O." + c.blobs.name + ".C." + info.NUID
	var seq uint64
	for n := uint32(0); n < info.Chunks; n++ {
		m, s, err := c.get(ctx, directGet{Seq: seq + 1, NextBySubj: chunks})
		if err != nil {
			return fail("chunk %d of %d: %v", n+1, info.Chunks, err)
		}
		if int64(len(data)+len(m.Data)) > b.Size {
			return fail("chunks hold more than %d bytes", b.Size)
		}
		seq = s
		h.Write(m.Data)
		data = append(data, m.Data...)
	}
	if int64(len(data)) != b.Size {
		return fail("read %d bytes, want %d", len(data), b.Size)
	}
	if got := "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil)); got != b.Digest {
		return fail("digest %s, the reference says %s", got, b.Digest)
	}
	if len(b.Key) > 0 {
		if data, err = schema.OpenBlob(b.Key, b.Name, data); err != nil {
			return fail("%v", err)
		}
	}
	res, err := schema.DecodeResult(data, enc)
	if err != nil {
		return nil, fmt.Errorf("%w: job %q, blob %s: %w", ErrBadResult, ref.ID, b.Name, err)
	}
	if res.ID != ref.ID {
		return fail("holds the result of job %q", res.ID)
	}
	return res, nil
}
