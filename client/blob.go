package client

import (
	"context"
	"fmt"
	"io"
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/schema"
)

// blobBucket is the blobs Object Store, bound on first use.
type blobBucket struct {
	name string
	mu   sync.Mutex
	obs  natsjs.ObjectStore
}

func (c *Client) blobStore(ctx context.Context) (natsjs.ObjectStore, error) {
	b := &c.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.obs != nil {
		return b.obs, nil
	}
	obs, err := c.js.ObjectStore(ctx, b.name)
	if err != nil {
		return nil, err
	}
	b.obs = obs
	return obs, nil
}

// resolve replaces a result that names a blob by the whole result stored
// in it, checking size, digest and id against the reference.
func (c *Client) resolve(ctx context.Context, ref *schema.Result, enc schema.Encoding) (*schema.Result, error) {
	b := ref.Blob
	fail := func(format string, args ...any) (*schema.Result, error) {
		return nil, fmt.Errorf("%w: job %q, blob %s: %s", ErrBlob, ref.ID, b.Name, fmt.Sprintf(format, args...))
	}
	if b.Size < 0 || b.Size > c.o.maxBlobBytes {
		return fail("size %d over the client's limit of %d bytes", b.Size, c.o.maxBlobBytes)
	}
	obs, err := c.blobStore(ctx)
	if err != nil {
		return fail("bucket %s: %v", c.blobs.name, err)
	}
	r, err := obs.Get(ctx, b.Name)
	if err != nil {
		return fail("%v", err)
	}
	defer r.Close()
	info, err := r.Info()
	if err != nil {
		return fail("%v", err)
	}
	if int64(info.Size) != b.Size || info.Digest != b.Digest {
		return fail("stored object is %d bytes %s, the reference says %d bytes %s", info.Size, info.Digest, b.Size, b.Digest)
	}
	// The reader checks the digest at the end of the object.
	data, err := io.ReadAll(io.LimitReader(r, b.Size+1))
	if err != nil {
		return fail("%v", err)
	}
	if int64(len(data)) != b.Size {
		return fail("read %d bytes, want %d", len(data), b.Size)
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
