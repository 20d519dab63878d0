package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
)

// Recorder records in the engines bucket what `jetembed warmup --nats`
// warmed, as a serving member records it: the init container's work,
// shared with the fleet, which pre-warms from the shared engine cache.
type Recorder struct {
	probeShare
	nc *nats.Conn
	kv *jetstream.KVStore
}

// DialRecorder connects with o and opens the engines bucket. sm is the SM
// of the shape keys and arch the hardware of shared probes
// (ort.Provider.ComputeCapability and Hardware).
func DialRecorder(ctx context.Context, o jetstream.Options, bucket, sm, arch string) (*Recorder, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	r := &Recorder{nc: nc}
	js, err := jetstream.New(nc)
	if err == nil {
		r.kv, err = jetstream.OpenKVStore(ctx, js, bucket)
	}
	r.probeShare = probeShare{log: log, kv: r.kv, member: fleet.Config{SM: sm}.WithDefaults(), arch: arch}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w (provision the bucket first)", err)
	}
	return r, nil
}

// Bucket is the engines bucket's name.
func (r *Recorder) Bucket() string { return r.kv.Bucket() }

// ShareProbe installs the cost coefficients a peer with the same model,
// SM and hardware stored, or probes e (opened without its probe) and
// stores them.
func (r *Recorder) ShareProbe(ctx context.Context, e *engine.Engine) error { return r.share(ctx, e) }

// Publish records every shape e warmed that the bucket lacks; it returns
// how many records it created.
func (r *Recorder) Publish(ctx context.Context, e *engine.Engine) (int, error) {
	c := r.member
	c.Model, c.Logger = e.ModelID(), r.log
	return fleet.Publish(ctx, r.kv, e, c)
}

// Close closes the connection.
func (r *Recorder) Close() { r.nc.Close() }
