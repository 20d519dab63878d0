package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Provision makes the JetStream objects of cfg exist with cfg's settings:
// the jobs, results and DLQ streams (and the usage stream when named), the durable pull consumer on the jobs
// stream, the engines KV bucket, the blobs Object Store bucket and (when
// named) the cache KV bucket. It is idempotent: what is missing is
// created, what matches is left alone (Unchanged), and drift is updated in
// place where JetStream allows it (limits, subjects, replicas, the
// consumer's ack wait, max deliver, backoff and max ack pending).
//
// Drift JetStream cannot apply in place (a stream's retention or storage, a
// consumer's deliver, ack or replay policy) is refused: that object is left
// as it is and the error, wrapping [ErrDrift], names the object and fields.
// A downgrade (fewer replicas, a subject removed) is refused the same way,
// wrapping [ErrDowngrade], unless [AllowDowngrade] is given.
//
// [WithMode] narrows what Provision may do: [ModeCreate] creates what is
// missing and changes nothing else, [ModeCheck] only looks. In both, drift
// is reported (Drifted) and never applied. [DryRun] reports what would be
// done without doing it.
//
// Every object is tried even if another fails; the error joins all
// failures, and the [ProvisionReport] says what happened to each object.
func Provision(ctx context.Context, js natsjs.JetStream, cfg Config, opts ...ProvisionOption) (ProvisionReport, error) {
	if err := cfg.Validate(); err != nil {
		return ProvisionReport{}, err
	}
	var o provisionOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := ProvisionReport{DryRun: o.dryRun}
	if o.serverTuning && !cfg.Consumer.PerTenant {
		// A member takes the consumer's mode from the server as it takes
		// its tuning: a template there means per-tenant consumers, whose
		// dead-letter advisories the DLQ captures for every consumer.
		cfg.Consumer.PerTenant = serverPerTenant(ctx, js, cfg)
	}
	for _, sc := range cfg.streamConfigs() {
		r.Outcomes = append(r.Outcomes, ensureStream(ctx, js, sc, o))
	}
	if !cfg.Consumer.PerTenant && !o.serverTuning {
		// A catch-all overlaps every tenant's consumer: they go first.
		r.Outcomes = append(r.Outcomes, retireTenantConsumers(ctx, js, cfg, o)...)
	}
	r.Outcomes = append(r.Outcomes, ensureConsumer(ctx, js, cfg.Jobs.Name, cfg.consumerConfig(), o))
	r.Outcomes = append(r.Outcomes, ensureBucket(ctx, js, cfg.bucketConfig(), cfg.Replicas, o))
	r.Outcomes = append(r.Outcomes, ensureObjectStore(ctx, js, cfg.blobsConfig(), o))
	if cfg.Cache.Name != "" {
		r.Outcomes = append(r.Outcomes, ensureCache(ctx, js, cfg.cacheConfig(), o))
	}
	var errs []error
	var missing []string
	for _, oc := range r.Outcomes {
		switch {
		case oc.Action == Missing:
			missing = append(missing, oc.Kind+" "+oc.Name)
		case oc.Err != nil:
			errs = append(errs, oc.Err)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s", ErrMissing, strings.Join(missing, ", ")))
	}
	return r, errors.Join(errs...)
}

func (c Config) streamConfigs() []natsjs.StreamConfig {
	stream := func(s StreamSpec, retention natsjs.RetentionPolicy, discard natsjs.DiscardPolicy, extra ...string) natsjs.StreamConfig {
		maxBytes := s.MaxBytes
		if maxBytes == 0 {
			maxBytes = -1
		}
		perSubject := s.MaxMsgsPerSubject
		if perSubject == 0 {
			perSubject = -1
		}
		return natsjs.StreamConfig{
			Name:       s.Name,
			Subjects:   append(slices.Clone(s.Subjects), extra...),
			Retention:  retention,
			Storage:    natsjs.FileStorage,
			Discard:    discard,
			MaxAge:     s.MaxAge,
			MaxBytes:   maxBytes,
			Duplicates: s.Duplicates,
			Replicas:   c.Replicas,
			// The oldest letters of a full subject go, never a new one:
			// DiscardNewPerSubject stays off.
			MaxMsgsPerSubject: perSubject,
		}
	}
	var advisories []string
	if c.CaptureMaxDeliveries {
		advisories = []string{c.MaxDeliveriesSubject()}
	}
	out := []natsjs.StreamConfig{
		// A full work queue must refuse new jobs, never drop queued ones.
		stream(c.Jobs, natsjs.WorkQueuePolicy, natsjs.DiscardNew),
		stream(c.Results, natsjs.LimitsPolicy, natsjs.DiscardOld),
		stream(c.DLQ, natsjs.LimitsPolicy, natsjs.DiscardOld, advisories...),
	}
	if c.Usage.Name != "" {
		out = append(out, stream(c.Usage, natsjs.LimitsPolicy, natsjs.DiscardOld))
	}
	return out
}

func (c Config) consumerConfig() natsjs.ConsumerConfig {
	filter := ""
	if c.Consumer.PerTenant {
		filter = c.templateFilter()
	}
	return natsjs.ConsumerConfig{
		Durable:       c.Consumer.Name,
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		ReplayPolicy:  natsjs.ReplayInstantPolicy,
		AckWait:       c.Consumer.AckWait,
		MaxDeliver:    c.Consumer.MaxDeliver,
		BackOff:       slices.Clone(c.Consumer.BackOff),
		MaxAckPending: c.Consumer.MaxAckPending,
		FilterSubject: filter,
	}
}

func (c Config) bucketConfig() natsjs.KeyValueConfig {
	return natsjs.KeyValueConfig{
		Bucket:         c.Engines.Name,
		Description:    "jetembed: compiled engine shapes and compile locks",
		History:        uint8(c.Engines.History),
		Storage:        natsjs.FileStorage,
		Replicas:       c.Replicas,
		LimitMarkerTTL: c.Engines.LimitMarkerTTL,
	}
}

// drift collects the fields that differ, split by whether JetStream can
// change them in place.
type drift struct {
	updatable, refused []Change
}

func (d *drift) check(field string, have, want any, updatable bool) {
	d.add(field, have, want, updatable, false)
}

// checkDown is check for a field whose change from have to want is a
// downgrade when lower reports so.
func (d *drift) checkDown(field string, have, want any, lower bool) {
	d.add(field, have, want, true, lower)
}

func (d *drift) add(field string, have, want any, updatable, down bool) {
	h, w := fmt.Sprint(have), fmt.Sprint(want)
	if h == w {
		return
	}
	c := Change{Field: field, Have: h, Want: w, Downgrade: down}
	if updatable {
		d.updatable = append(d.updatable, c)
	} else {
		d.refused = append(d.refused, c)
	}
}

// outcome turns the drift into the object's outcome; apply performs the
// update when the options allow it, there is updatable drift and nothing
// refused.
func (d drift) outcome(ctx context.Context, kind, name string, o provisionOptions, apply func(context.Context) error) ObjectOutcome {
	oc := ObjectOutcome{Kind: kind, Name: name}
	var downs []Change
	for _, c := range d.updatable {
		if c.Downgrade {
			downs = append(downs, c)
		}
	}
	switch {
	case len(d.refused) > 0:
		oc.Action, oc.Changes = Refused, d.refused
		oc.Err = fmt.Errorf("%w: %s %s: %s", ErrDrift, kind, name, changeList(d.refused))
	case len(d.updatable) == 0:
		oc.Action = Unchanged
	case o.mode != ModeApply:
		oc.Action, oc.Changes = Drifted, d.updatable
	case len(downs) > 0 && !o.allowDowngrade:
		oc.Action, oc.Changes = Refused, downs
		oc.Err = fmt.Errorf("%w: %s %s: %s (give --allow-downgrade to apply)", ErrDowngrade, kind, name, changeList(downs))
	default:
		oc.Action, oc.Changes = Updated, d.updatable
		if o.dryRun {
			return oc
		}
		if err := apply(ctx); err != nil {
			oc.Action = Failed
			oc.Err = fmt.Errorf("update %s %s (%s): %w", kind, name, changeList(d.updatable), err)
		}
	}
	return oc
}

func changeList(cs []Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}

// lostSubjects reports whether have holds a subject that no subject of
// want covers.
func lostSubjects(have, want []string) bool {
	for _, s := range have {
		if !slices.ContainsFunc(want, func(w string) bool { return subjectCovers(w, s) }) {
			return true
		}
	}
	return false
}

// subjectCovers reports whether every subject pattern s matches is
// matched by pattern w.
func subjectCovers(w, s string) bool {
	wt, st := strings.Split(w, "."), strings.Split(s, ".")
	for i, tok := range wt {
		switch {
		case tok == ">":
			return i < len(st)
		case i >= len(st):
			return false
		case tok == "*":
			if st[i] == ">" {
				return false
			}
		case tok != st[i]:
			return false
		}
	}
	return len(wt) == len(st)
}

func ensureStream(ctx context.Context, js natsjs.JetStream, want natsjs.StreamConfig, o provisionOptions) ObjectOutcome {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return created(ctx, "stream", want.Name, o, func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, want)
			return err
		})
	}
	if err != nil {
		return failed("stream", want.Name, err)
	}
	have := s.CachedInfo().Config
	var d drift
	d.check("Retention", have.Retention, want.Retention, false)
	d.check("Storage", have.Storage, want.Storage, false)
	d.checkDown("Subjects", sorted(have.Subjects), sorted(want.Subjects), lostSubjects(have.Subjects, want.Subjects))
	d.check("Discard", have.Discard, want.Discard, true)
	d.check("MaxAge", have.MaxAge, want.MaxAge, true)
	d.check("MaxBytes", have.MaxBytes, want.MaxBytes, true)
	d.check("MaxMsgsPerSubject", max(have.MaxMsgsPerSubject, -1), want.MaxMsgsPerSubject, true)
	if want.Duplicates > 0 {
		d.check("Duplicates", have.Duplicates, want.Duplicates, true)
	}
	d.checkDown("Replicas", have.Replicas, want.Replicas, want.Replicas < have.Replicas)
	return d.outcome(ctx, "stream", want.Name, o, func(ctx context.Context) error {
		upd := have
		upd.Subjects, upd.Discard = want.Subjects, want.Discard
		upd.MaxAge, upd.MaxBytes, upd.Replicas = want.MaxAge, want.MaxBytes, want.Replicas
		upd.MaxMsgsPerSubject = want.MaxMsgsPerSubject
		if want.Duplicates > 0 {
			upd.Duplicates = want.Duplicates
		}
		_, err := js.UpdateStream(ctx, upd)
		return err
	})
}

func ensureConsumer(ctx context.Context, js natsjs.JetStream, stream string, want natsjs.ConsumerConfig, o provisionOptions) ObjectOutcome {
	name := stream + "/" + want.Durable
	c, err := js.Consumer(ctx, stream, want.Durable)
	// Without its stream (check mode, dry run) the consumer is missing too.
	if errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrStreamNotFound) {
		return created(ctx, "consumer", name, o, func(ctx context.Context) error {
			_, err := js.CreateConsumer(ctx, stream, want)
			return err
		})
	}
	if err != nil {
		return failed("consumer", name, err)
	}
	have := c.CachedInfo().Config
	var d drift
	d.check("DeliverPolicy", have.DeliverPolicy, want.DeliverPolicy, false)
	d.check("AckPolicy", have.AckPolicy, want.AckPolicy, false)
	d.check("ReplayPolicy", have.ReplayPolicy, want.ReplayPolicy, false)
	if !o.serverTuning {
		d.check("AckWait", have.AckWait, want.AckWait, true)
		d.check("MaxDeliver", have.MaxDeliver, want.MaxDeliver, true)
		d.check("BackOff", have.BackOff, want.BackOff, true)
		d.check("MaxAckPending", have.MaxAckPending, want.MaxAckPending, true)
	}
	if !o.serverTuning {
		// serve takes the mode (one consumer or per tenant) from the server.
		d.check("FilterSubject", have.FilterSubject, want.FilterSubject, true)
	}
	return d.outcome(ctx, "consumer", name, o, func(ctx context.Context) error {
		upd := have
		upd.AckWait, upd.MaxDeliver, upd.BackOff = want.AckWait, want.MaxDeliver, want.BackOff
		upd.MaxAckPending, upd.FilterSubject = want.MaxAckPending, want.FilterSubject
		_, err := js.UpdateConsumer(ctx, stream, upd)
		return err
	})
}

func ensureBucket(ctx context.Context, js natsjs.JetStream, want natsjs.KeyValueConfig, replicas int, o provisionOptions) ObjectOutcome {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return created(ctx, "kv", want.Bucket, o, func(ctx context.Context) error {
			_, err := js.CreateKeyValue(ctx, want)
			return err
		})
	}
	if err != nil {
		return failed("kv", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return failed("kv", want.Bucket, err)
	}
	bs, ok := st.(*natsjs.KeyValueBucketStatus)
	if !ok {
		return failed("kv", want.Bucket, fmt.Errorf("unexpected status type %T", st))
	}
	info := bs.StreamInfo().Config
	var d drift
	d.check("Storage", info.Storage, want.Storage, false)
	d.check("History", st.History(), int64(want.History), true)
	d.check("TTL", st.TTL(), want.TTL, true)
	d.checkDown("Replicas", info.Replicas, replicas, replicas < info.Replicas)
	d.check("LimitMarkerTTL", info.SubjectDeleteMarkerTTL, want.LimitMarkerTTL, true)
	return d.outcome(ctx, "kv", want.Bucket, o, func(ctx context.Context) error {
		_, err := js.UpdateKeyValue(ctx, want)
		return err
	})
}

func created(ctx context.Context, kind, name string, o provisionOptions, create func(context.Context) error) ObjectOutcome {
	if o.mode == ModeCheck {
		return ObjectOutcome{Kind: kind, Name: name, Action: Missing}
	}
	if o.dryRun {
		return ObjectOutcome{Kind: kind, Name: name, Action: Created}
	}
	if err := create(ctx); err != nil {
		return failed(kind, name, fmt.Errorf("create: %w", err))
	}
	return ObjectOutcome{Kind: kind, Name: name, Action: Created}
}

func failed(kind, name string, err error) ObjectOutcome {
	return ObjectOutcome{Kind: kind, Name: name, Action: Failed, Err: fmt.Errorf("%s %s: %w", kind, name, err)}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (c Config) blobsConfig() natsjs.ObjectStoreConfig {
	return natsjs.ObjectStoreConfig{
		Bucket:      c.Blobs.Name,
		Description: "jetembed: results too large for one message",
		TTL:         c.Blobs.TTL,
		MaxBytes:    c.Blobs.MaxBytes,
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas,
	}
}

func ensureObjectStore(ctx context.Context, js natsjs.JetStream, want natsjs.ObjectStoreConfig, o provisionOptions) ObjectOutcome {
	obs, err := js.ObjectStore(ctx, want.Bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return created(ctx, "objstore", want.Bucket, o, func(ctx context.Context) error {
			_, err := js.CreateObjectStore(ctx, want)
			return err
		})
	}
	if err != nil {
		return failed("objstore", want.Bucket, err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return failed("objstore", want.Bucket, err)
	}
	var d drift
	d.check("Storage", st.Storage(), want.Storage, false)
	d.check("TTL", st.TTL(), want.TTL, true)
	if bs, ok := st.(*natsjs.ObjectBucketStatus); ok && bs.StreamInfo() != nil {
		limit := want.MaxBytes
		if limit <= 0 {
			limit = -1 // nats.go stores "no cap" as -1, whether asked with 0 or -1
		}
		d.check("MaxBytes", bs.StreamInfo().Config.MaxBytes, limit, true)
	}
	d.checkDown("Replicas", st.Replicas(), want.Replicas, want.Replicas < st.Replicas())
	return d.outcome(ctx, "objstore", want.Bucket, o, func(ctx context.Context) error {
		_, err := js.UpdateObjectStore(ctx, want)
		return err
	})
}

// retireTenantConsumers deletes the tenants' consumers made from the
// template (ModeApply only: elsewhere they are reported Drifted), so that
// the durable can become the catch-all again.
func retireTenantConsumers(ctx context.Context, js natsjs.JetStream, cfg Config, o provisionOptions) []ObjectOutcome {
	s, err := js.Stream(ctx, cfg.Jobs.Name)
	if err != nil {
		return nil // no stream, no consumers (reported with the stream)
	}
	var out []ObjectOutcome
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Config.Metadata[MetaTemplate] != cfg.Consumer.Name {
			continue
		}
		name := cfg.Jobs.Name + "/" + info.Name
		oc := ObjectOutcome{Kind: "consumer", Name: name, Action: Updated,
			Changes: []Change{{Field: "Exists", Have: "true", Want: "false (the catch-all replaces per-tenant consumers)"}}}
		switch {
		case o.mode != ModeApply:
			oc.Action = Drifted
		case o.dryRun:
		default:
			if err := js.DeleteConsumer(ctx, cfg.Jobs.Name, info.Name); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
				oc.Action, oc.Err = Failed, fmt.Errorf("delete consumer %s: %w", name, err)
			}
		}
		out = append(out, oc)
	}
	if err := lister.Err(); err != nil {
		out = append(out, failed("consumer", cfg.Jobs.Name+"/*", fmt.Errorf("list: %w", err)))
	}
	return out
}

// serverPerTenant reports whether the server's durable of cfg is a
// per-tenant template (false when it cannot be read: the check that
// follows reports why).
func serverPerTenant(ctx context.Context, js natsjs.JetStream, cfg Config) bool {
	c, err := js.Consumer(ctx, cfg.Jobs.Name, cfg.Consumer.Name)
	if err != nil {
		return false
	}
	return cfg.isPerTenantTemplate(c.CachedInfo().Config)
}
