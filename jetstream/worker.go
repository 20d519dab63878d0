package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
)

// ErrWorkerStopped is the cause [Worker.Err] wraps when a worker stopped on
// its own: its fetch loop or its consumer ended while nobody asked.
var ErrWorkerStopped = errors.New("worker stopped")

// DefaultGrace bounds the drain of a worker that stops on its own
// ([WorkerConfig.Grace]) and of a node that stops ([node.Config.Grace]).
const DefaultGrace = 30 * time.Second

// DefaultRefresh is how often a worker reads its jobs consumer's info
// ([WorkerConfig.Refresh]), a node's too ([node.Config.Refresh]).
const DefaultRefresh = 2 * time.Second

// WorkerConfig is what [StartWorker] runs.
type WorkerConfig struct {
	// Config names the jobs stream and durable consumer the worker pulls
	// from, and the results, DLQ and usage streams it publishes to (no
	// usage stream named: usage goes to the metrics only). Its consumer
	// settings (AckWait, MaxDeliver, BackOff, MaxAckPending) are not used:
	// the worker reads them from the server.
	Config Config
	// Consumer tunes the job loop; its Delivery limits (AckWait,
	// MaxDeliver) are the server's.
	Consumer consumer.Config
	// Embedder makes the vectors.
	Embedder engine.Embedder
	// Blobs stores results over the server's max payload in the blobs
	// Object Store bucket and replies with a reference (serve --blobs);
	// false answers them result_too_large.
	Blobs bool
	// Cache looks each job's texts up in the cache bucket of Config
	// (EMBED_CACHE), before the engine, and stores what the engine
	// computed (serve --cache kv); the bucket must exist.
	Cache bool
	// Sink, when set, wraps the consumer on its way from the fetch loop and
	// the service (tests look at deliveries there).
	Sink func(*consumer.Loop) Sink
	// Service registers the request-reply service; its Logger defaults to
	// Logger.
	Service ServiceOptions
	// PrefetchMax bounds the adaptive prefetch (default
	// [DefaultPrefetchMax]); it never exceeds the server's MaxAckPending.
	PrefetchMax int
	// Pull are further options of the fetch loop.
	Pull []PullOption
	// Fair tunes the per-tenant pulling, which the worker runs when the
	// jobs consumer on the server is a per-tenant template (`jetembed
	// provision --per-tenant`), and the tenants' quotas.
	Fair FairConfig
	// Refresh is how often the worker samples the consumer's info: the
	// one reading of it in the process, for [Worker.Backlog] (the gauges,
	// the heartbeat and the fleet's idleness read it there) and for
	// changed settings, which reopen the fetch loop (default
	// [DefaultRefresh], the node's too).
	Refresh time.Duration
	// Grace bounds the drain when the worker stops on its own (default
	// [DefaultGrace], the node's too); [Worker.Stop] takes its own
	// deadline.
	Grace time.Duration
	// Logger receives start, settings changes and stop; default
	// slog.Default().
	Logger *slog.Logger
}

// FairConfig tunes per-tenant pulling (see [ConsumerSpec.PerTenant]).
type FairConfig struct {
	// Shares are the tenants' weights and quotas. Job quotas need
	// per-tenant consumers (a job over quota waits in the stream, never
	// fetched); request quotas apply in either mode.
	Shares Shares
	// Idle is how long a tenant's consumer stays empty before it is
	// deleted (default [DefaultTenantIdle]).
	Idle time.Duration
	// Scan bounds how often the stream's subjects are listed to find
	// tenants without a consumer (default [DefaultTenantScan]); they are
	// also listed at any refresh whose counts show jobs no consumer
	// covers, at most once a Refresh.
	Scan time.Duration
	// MaxTenants bounds the consumers of tenants the shares do not name
	// (default [DefaultMaxTenants]): without permissions a producer can
	// mint a tenant a subject, and each consumer costs the servers state
	// and every member a fetch loop and its buffer. A tenant beyond it
	// has its jobs wait in the stream for a free slot; while any wait, an
	// empty consumer of an unnamed tenant is retired at once, and one
	// that has held its slot for Idle yields it (its loop stops pulling
	// and finishes what it buffered, its consumer goes once nothing is in
	// flight, or after an ack wait at the latest, and its jobs wait for a
	// slot again from then: the longest waiting get one first), so the
	// slots pass round. A tenant the shares name (a weight or a quota of
	// its own) always gets its consumer.
	MaxTenants int
}

// ServerSettings are the durable consumer's settings as the server has
// them: the truth the worker's timing derives from.
type ServerSettings struct {
	AckWait       time.Duration
	MaxDeliver    int
	BackOff       []time.Duration
	MaxAckPending int
}

func settingsOf(c natsjs.ConsumerConfig) ServerSettings {
	return ServerSettings{AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, BackOff: slices.Clone(c.BackOff), MaxAckPending: c.MaxAckPending}
}

func (s ServerSettings) equal(o ServerSettings) bool {
	return s.AckWait == o.AckWait && s.MaxDeliver == o.MaxDeliver && s.MaxAckPending == o.MaxAckPending && slices.Equal(s.BackOff, o.BackOff)
}

// limits are the consumer's view: the shortest ack wait any delivery gets
// (a BackOff step below AckWait shortens it) and the last delivery.
func (s ServerSettings) limits() consumer.DeliveryLimits {
	ackWait := s.AckWait
	for _, d := range s.BackOff {
		if d > 0 && d < ackWait {
			ackWait = d
		}
	}
	maxDeliver := s.MaxDeliver
	if maxDeliver <= 0 {
		maxDeliver = -1
	}
	return consumer.DeliveryLimits{AckWait: ackWait, MaxDeliver: maxDeliver}
}

// Worker is one consumer process's work: the job loop, the request-reply
// service and the fetch loop of the shared durable consumer, started by
// [StartWorker]. Like nats.go's ConsumeContext it is stopped with
// [Worker.Stop] and reports its end through [Worker.Done] and
// [Worker.Err].
type Worker struct {
	nc   *nats.Conn
	js   natsjs.JetStream
	cfg  WorkerConfig
	log  *slog.Logger
	cons *consumer.Loop
	sink Sink
	svc  micro.Service

	runDone chan error    // the consumer's Run returned
	stopped chan struct{} // closed when everything has stopped
	stopReq chan struct{} // closed by the first stop (Stop or on its own)
	once    sync.Once
	err     error // why it stopped on its own; set before stopped closes

	mu       sync.Mutex
	loop     *PullLoop   // the fetch loop of the one consumer, or nil
	tenants  *tenantPull // the per-tenant fetch loops, or nil
	settings ServerSettings
	template natsjs.ConsumerConfig

	pending, ackPending atomic.Int64
}

// StartWorker reads the durable consumer's settings from the server,
// starts the job loop with them, registers the request-reply service and
// starts fetching. The consumer's info is read again every
// [WorkerConfig.Refresh]: when the settings changed (someone ran
// `jetembed provision`), the job loop takes them and the fetch loop is
// reopened with them. ctx bounds the start only.
func StartWorker(ctx context.Context, nc *nats.Conn, cfg WorkerConfig) (*Worker, error) {
	if cfg.Embedder == nil {
		return nil, errors.New("worker: nil Embedder")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The tokenize endpoint answers without the consumer: it checks its
	// inboxes against the consumer's reply policy.
	cfg.Service.Replies = cfg.Consumer.Replies
	if sm, ok := cfg.Consumer.Metrics.(ServiceMetrics); ok && cfg.Service.Metrics == nil {
		cfg.Service.Metrics = sm
	}
	if cfg.Service.Logger == nil {
		cfg.Service.Logger = cfg.Logger
	}
	if cfg.PrefetchMax <= 0 {
		cfg.PrefetchMax = DefaultPrefetchMax
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	js, err := New(nc)
	if err != nil {
		return nil, err
	}
	jc, err := js.Consumer(ctx, cfg.Config.Jobs.Name, cfg.Config.Consumer.Name)
	if err != nil {
		return nil, fmt.Errorf("jobs consumer %s/%s: %w", cfg.Config.Jobs.Name, cfg.Config.Consumer.Name, err)
	}
	st := settingsOf(jc.CachedInfo().Config)
	pub, err := NewPublisher(nc, cfg.Config)
	if err != nil {
		return nil, err
	}
	cc := cfg.Consumer
	if cfg.Blobs {
		cc.Blobs = pub
	}
	if cc.Usage == nil && cfg.Config.Usage.Name != "" {
		cc.Usage = pub
	}
	if cfg.Cache {
		// serve checked at start that the bucket exists; one missing now
		// (deleted, or a new connection before provision made it) is
		// opened again later, and meanwhile every text is computed.
		cache, err := OpenCache(ctx, js, cfg.Config.Cache.Name)
		if err != nil {
			cfg.Logger.Warn("the result cache is not available: texts are computed until it is", "err", err)
			cache = NewCache(js, cfg.Config.Cache.Name)
		}
		cc.Cache = cache
		if cc.CacheValueBytes <= 0 {
			cc.CacheValueBytes = cache.MaxValueBytes()
		}
	}
	cc.Delivery = st.limits()
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	cons, err := consumer.New(cc, cfg.Embedder, pub)
	if err != nil {
		return nil, err
	}
	w := &Worker{nc: nc, js: js, cfg: cfg, log: cfg.Logger, cons: cons, sink: cons, settings: st,
		template: jc.CachedInfo().Config,
		runDone:  make(chan error, 1), stopped: make(chan struct{}), stopReq: make(chan struct{})}
	if cfg.Sink != nil {
		w.sink = cfg.Sink(cons)
	}
	perTenant := cfg.Config.isPerTenantTemplate(jc.CachedInfo().Config)
	if err := cfg.Fair.Shares.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", consumer.ErrConfig, err)
	}
	// Requests over their tenant's quota are refused quota_exceeded; the
	// per-tenant pulling keeps queued jobs within it.
	q := newQuotas(cfg.Fair.Shares, nil)
	if perTenant {
		prefix, _ := cfg.Config.jobsPrefix()
		if t := cc.Replies.Tenancy; t.Off || t.WithDefaults().Token != cfg.Config.TenantToken() {
			return nil, fmt.Errorf("%w: the jobs consumer %s is a per-tenant template: tenants must be on, at token %d of a job's subject",
				consumer.ErrConfig, cfg.Config.Consumer.Name, cfg.Config.TenantToken())
		}
		w.tenants = newTenantPull(w, prefix, q, w.sink)
	} else if len(cfg.Fair.Shares.Quotas) > 0 {
		w.log.Warn("tenant quotas refuse requests only: queued jobs are held back by per-tenant consumers (jetembed provision --per-tenant)")
	}
	w.sink = quotaSink{Sink: w.sink, q: q}
	w.setBacklog(jc.CachedInfo())
	// The consumer is stopped by Drain, not by a context: a stop must let
	// it finish what it holds.
	go func() { w.runDone <- cons.Run(context.Background()) }()
	w.log.Info("consumer settings from the server", "consumer", cfg.Config.Jobs.Name+"/"+cfg.Config.Consumer.Name,
		"ack_wait", st.AckWait.String(), "max_deliver", st.MaxDeliver, "backoff", fmt.Sprint(st.BackOff), "max_ack_pending", st.MaxAckPending)

	if w.svc, err = StartService(ctx, nc, w.sink, cfg.Service); err != nil {
		w.drain(context.Background())
		return nil, err
	}
	if w.tenants != nil {
		pending, ackPending, err := w.tenants.sync(ctx, w.template, st, false)
		if err != nil {
			w.tenants.stop()
			_ = w.svc.Stop()
			w.drain(context.Background())
			return nil, err
		}
		w.pending.Store(int64(pending))
		w.ackPending.Store(int64(ackPending))
		w.log.Info("pulling per tenant", "tenants", fmt.Sprint(w.tenants.tenants()), "shares", cfg.Fair.Shares.String())
	} else {
		loop, err := w.pull(jc, st)
		if err != nil {
			_ = w.svc.Stop()
			w.drain(context.Background())
			return nil, err
		}
		w.loop = loop
	}
	go w.watch()
	return w, nil
}

// pull opens the fetch loop sized by the server's settings.
func (w *Worker) pull(jc natsjs.Consumer, st ServerSettings) (*PullLoop, error) {
	return w.pullWith(jc, st, w.sink)
}

// pullWith opens a fetch loop of jc into sink.
func (w *Worker) pullWith(jc natsjs.Consumer, st ServerSettings, sink Sink, extra ...PullOption) (*PullLoop, error) {
	hi := max(w.cfg.PrefetchMax, 1)
	if st.MaxAckPending > 0 {
		hi = min(hi, st.MaxAckPending)
	}
	opts := []PullOption{PullLogger(w.log), PullConn(w.nc), PullAckWait(st.limits().AckWait),
		PrefetchLimits(min(DefaultPrefetchMin, hi), hi)}
	opts = append(opts, w.cfg.Pull...)
	return Pull(context.Background(), jc, sink, append(opts, extra...)...)
}

// Loop is the job loop, for its Stats.
func (w *Worker) Loop() *consumer.Loop { return w.cons }

// Settings are the server's consumer settings the worker runs with.
func (w *Worker) Settings() ServerSettings {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settings
}

// Backlog is the consumer's pending and ack-pending counts at the last
// refresh.
func (w *Worker) Backlog() (pending uint64, ackPending int) {
	return uint64(w.pending.Load()), int(w.ackPending.Load())
}

// Prefetch is the fetch loop's current prefetch in messages.
func (w *Worker) Prefetch() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tenants != nil {
		return w.tenants.prefetch()
	}
	return w.loop.Prefetch()
}

// Tenants lists the tenants pulled from through a consumer of their own
// (nil without per-tenant consumers).
func (w *Worker) Tenants() []string {
	if w.tenants == nil {
		return nil
	}
	return w.tenants.tenants()
}

// Done is closed once the worker has stopped, after [Worker.Stop] or on
// its own (see [Worker.Err]).
func (w *Worker) Done() <-chan struct{} { return w.stopped }

// Err is nil after a requested stop, and wraps [ErrWorkerStopped] with the
// cause when the worker stopped on its own. It is valid once
// [Worker.Done] is closed.
func (w *Worker) Err() error {
	select {
	case <-w.stopped:
		return w.err
	default:
		return nil
	}
}

// Stop stops fetching (buffered messages go back to the server at once),
// unregisters the service, lets in-flight jobs finish until ctx ends (then
// NAKs what is left), and waits for everything to end. It does not close
// the connection. It returns the drain's error: nil when every job
// finished in time.
func (w *Worker) Stop(ctx context.Context) error {
	var err error
	w.once.Do(func() { err = w.stop(ctx, nil) })
	<-w.stopped
	return err
}

func (w *Worker) stop(ctx context.Context, cause error) error {
	w.err = cause
	close(w.stopReq)
	w.mu.Lock()
	loop := w.loop
	w.mu.Unlock()
	if loop != nil {
		loop.Stop()
	}
	tenantsDone := make(chan struct{})
	if w.tenants != nil {
		go func() { defer close(tenantsDone); w.tenants.stop() }()
	} else {
		close(tenantsDone)
	}
	if err := w.svc.Stop(); err != nil {
		w.log.Warn("micro service stop", "err", err)
	}
	err := w.drain(ctx)
	if loop != nil {
		<-loop.Done()
	}
	<-tenantsDone
	close(w.stopped)
	return err
}

// drain drains the consumer within ctx and waits for its Run to end.
func (w *Worker) drain(ctx context.Context) error {
	err := w.cons.Drain(ctx)
	if err != nil {
		w.log.Warn("drain deadline: unfinished jobs were NAKed", "err", err)
	}
	err2 := <-w.runDone
	w.runDone <- err2
	return err
}

// watch refreshes the settings and stops the worker when its fetch loop or
// its consumer ends on its own.
func (w *Worker) watch() {
	t := time.NewTicker(w.cfg.Refresh)
	defer t.Stop()
	for {
		w.mu.Lock()
		var closed <-chan struct{}
		if w.tenants != nil {
			closed = w.tenants.Done()
		} else {
			closed = w.loop.Done()
		}
		w.mu.Unlock()
		var cause error
		select {
		case <-w.stopReq:
			return
		case <-t.C:
			w.refresh()
			continue
		case <-closed:
			cause = errors.New("the fetch loop ended (nats connection closed)")
		case err := <-w.runDone:
			w.runDone <- err
			cause = fmt.Errorf("the consumer stopped: %v", err)
		}
		w.once.Do(func() {
			w.log.Error("worker stopping", "err", cause)
			ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Grace)
			defer cancel()
			_ = w.stop(ctx, fmt.Errorf("%w: %w", ErrWorkerStopped, cause))
		})
		return
	}
}

// refresh reads the consumer's info; changed settings go to the job loop,
// and the fetch loop is reopened with them.
func (w *Worker) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Refresh, 10*time.Second))
	defer cancel()
	jc, err := w.js.Consumer(ctx, w.cfg.Config.Jobs.Name, w.cfg.Config.Consumer.Name)
	if err != nil {
		w.log.Debug("consumer info", "err", err)
		return
	}
	info := jc.CachedInfo()
	st := settingsOf(info.Config)
	if w.tenants != nil {
		w.refreshTenants(ctx, info.Config, st)
		return
	}
	w.setBacklog(info)
	w.mu.Lock()
	defer w.mu.Unlock()
	if st.equal(w.settings) {
		return
	}
	if err := w.cons.SetDeliveryLimits(st.limits()); err != nil {
		w.log.Warn("consumer settings from the server not usable", "err", err)
		return
	}
	w.log.Info("consumer settings changed on the server", "ack_wait", st.AckWait.String(), "max_deliver", st.MaxDeliver,
		"backoff", fmt.Sprint(st.BackOff), "max_ack_pending", st.MaxAckPending)
	w.settings = st
	select {
	case <-w.stopReq:
		return
	default:
	}
	// Drain hands what the old loop buffered to the consumer; the new one
	// pulls with the new prefetch bound and NAK timing.
	old := w.loop
	loop, err := w.pull(jc, st)
	if err != nil {
		w.log.Warn("fetch loop not reopened with the new settings", "err", err)
		return
	}
	old.Drain()
	w.loop = loop
}

// refreshTenants is refresh with per-tenant consumers: the template's
// settings go to the job loop and every tenant's consumer and loop.
func (w *Worker) refreshTenants(ctx context.Context, template natsjs.ConsumerConfig, st ServerSettings) {
	w.mu.Lock()
	changed := !st.equal(w.settings)
	if changed {
		if err := w.cons.SetDeliveryLimits(st.limits()); err != nil {
			w.mu.Unlock()
			w.log.Warn("consumer settings from the server not usable", "err", err)
			return
		}
		w.log.Info("consumer settings changed on the server", "ack_wait", st.AckWait.String(), "max_deliver", st.MaxDeliver,
			"backoff", fmt.Sprint(st.BackOff), "max_ack_pending", st.MaxAckPending)
		w.settings, w.template = st, template
	}
	template = w.template
	w.mu.Unlock()
	select {
	case <-w.stopReq:
		return
	default:
	}
	pending, ackPending, err := w.tenants.sync(ctx, template, st, changed)
	if err != nil {
		w.log.Debug("tenants' consumers", "err", err)
		return
	}
	w.pending.Store(int64(pending))
	w.ackPending.Store(int64(ackPending))
}

func (w *Worker) setBacklog(info *natsjs.ConsumerInfo) {
	if info == nil {
		return
	}
	w.pending.Store(int64(info.NumPending))
	w.ackPending.Store(int64(info.NumAckPending))
}
