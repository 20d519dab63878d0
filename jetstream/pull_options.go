package jetstream

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
)

// PullOption tunes [Pull].
type PullOption func(*pullOptions)

type pullOptions struct {
	nc       *nats.Conn
	min, max int
	maxBytes int
	ackWait  time.Duration
	every    time.Duration
	// expires bounds one pull request; heartbeat is the server's idle
	// heartbeat on it, whose absence (twice in a row) ends the request.
	expires, heartbeat time.Duration
	logger             *slog.Logger
	now                func() time.Time
	onRequest          func() // test hook: called before each pull request
	// hold, when set, says how long to wait before the next pull request
	// (a tenant over its quota); 0 pulls now.
	hold func() time.Duration
}

func (o pullOptions) holdFor() time.Duration {
	if o.hold == nil {
		return 0
	}
	return o.hold()
}

// pullMinOne starts the adaptive prefetch at one message (a tenant with
// a quota: what it pulls ahead of its quota is held unsettled, so it
// pulls little ahead and grows with the throughput it gets).
func pullMinOne() PullOption {
	return func(o *pullOptions) { o.min = 1 }
}

// pullHold makes the loop ask hold before every pull request and wait
// what it says.
func pullHold(hold func() time.Duration) PullOption {
	return func(o *pullOptions) { o.hold = hold }
}

// Default prefetch limits of [Pull], in messages.
const (
	DefaultPrefetchMin = 8
	DefaultPrefetchMax = 1024
)

// DefaultPrefetchBytes is the byte cap of a pull request (and so of the
// prefetch buffer) when [PrefetchBytes] is not set: half of nats.go's
// default pending bytes limit of a subscription.
const DefaultPrefetchBytes = nats.DefaultSubPendingBytesLimit / 2

// maxRequestBytes bounds the byte cap.
const maxRequestBytes = 1 << 30

// Defaults of one pull request of [Pull].
const (
	DefaultPullExpiry    = 10 * time.Second
	DefaultPullHeartbeat = 2 * time.Second
)

func defaultPullOptions() pullOptions {
	return pullOptions{
		min: DefaultPrefetchMin, max: DefaultPrefetchMax,
		every:     2 * time.Second,
		expires:   DefaultPullExpiry,
		heartbeat: DefaultPullHeartbeat,
		logger:    slog.Default(),
		now:       time.Now,
	}
}

// requestBytes is the byte cap of the buffer: the configured one, but
// never below the connection's max payload, so the largest job the server
// accepts always fits.
func (o pullOptions) requestBytes() int {
	n := o.maxBytes
	if n <= 0 {
		n = DefaultPrefetchBytes
	}
	if o.nc != nil {
		if mp := int(o.nc.MaxPayload()); mp > 0 {
			n = max(n, mp+4096)
		}
	}
	return min(n, maxRequestBytes)
}

// PrefetchLimits bounds the adaptive prefetch; the loop starts at lo.
// lo == hi fixes it.
func PrefetchLimits(lo, hi int) PullOption {
	return func(o *pullOptions) { o.min, o.max = lo, hi }
}

// PrefetchBytes caps the bytes of the prefetch buffer; 0 means
// [DefaultPrefetchBytes]. A cap below the connection's max payload is
// raised to it (see [PullConn]). A pull request asks for no more jobs
// than fit the room left at the estimated job size (the largest recent
// job, at least a quarter of the max payload).
func PrefetchBytes(n int) PullOption {
	return func(o *pullOptions) { o.maxBytes = n }
}

// minJobEstimate is the least a job is assumed to weigh when a pull
// request is sized: a quarter of the server's max payload (of its 1 MiB
// default without the connection). A request sized on small jobs may meet
// jobs of the max payload: the buffer then holds at most four times its
// byte cap, once.
func (o pullOptions) minJobEstimate() int {
	mp := 1 << 20
	if o.nc != nil && o.nc.MaxPayload() > 0 {
		mp = int(o.nc.MaxPayload())
	}
	return max(mp/4, 1)
}

// PullAckWait sets the AckWait the prefetch is sized and heartbeated
// against; by default it is read from the consumer's cached info.
func PullAckWait(d time.Duration) PullOption {
	return func(o *pullOptions) { o.ackWait = d }
}

// PullMeasureEvery sets the throughput measurement interval (default 2s).
func PullMeasureEvery(d time.Duration) PullOption {
	return func(o *pullOptions) { o.every = d }
}

// PullExpiry sets how long one pull request waits at the server for
// messages (default [DefaultPullExpiry]) and the server's idle heartbeat on
// it (default [DefaultPullHeartbeat]; at most half of expires). A request
// the server lost is noticed after two missed heartbeats.
func PullExpiry(expires, heartbeat time.Duration) PullOption {
	return func(o *pullOptions) { o.expires, o.heartbeat = expires, heartbeat }
}

// PullConn gives the loop the connection of the consumer. The loop needs
// it to keep NAK delays exact on a consumer with BackOff (nats-server adds
// the backoff step to the delay otherwise; see delivery.go), to end a pull
// request at once on a reconnect, and to size requests to the server's max
// payload. Without it, NAK delays are sent as asked and a request parked
// on a lost server ends after two missed heartbeats.
func PullConn(nc *nats.Conn) PullOption {
	return func(o *pullOptions) { o.nc = nc }
}

// PullLogger sets the logger of the loop (default slog.Default()).
func PullLogger(l *slog.Logger) PullOption {
	return func(o *pullOptions) {
		if l != nil {
			o.logger = l
		}
	}
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

// rateMeter turns the sink's running totals into a smoothed jobs/s and
// texts/s, counting only intervals in which the sink held work.
type rateMeter struct {
	at          time.Time
	jobs, texts uint64
	jobsRate    float64
	textsRate   float64
	seen        bool
}

func (r *rateMeter) start(now time.Time, st consumer.Stats) {
	r.at, r.jobs, r.texts = now, st.Jobs, st.Texts
}

// observe returns the smoothed rates once per interval; ok is false between
// measurements and after an idle interval.
func (r *rateMeter) observe(now time.Time, st consumer.Stats, every time.Duration) (jobs, texts float64, ok bool) {
	dt := now.Sub(r.at)
	if dt < every {
		return 0, 0, false
	}
	dj, dx := st.Jobs-r.jobs, st.Texts-r.texts
	r.at, r.jobs, r.texts = now, st.Jobs, st.Texts
	if st.Held == 0 || dj == 0 {
		return 0, 0, false
	}
	j, x := float64(dj)/dt.Seconds(), float64(dx)/dt.Seconds()
	if !r.seen {
		r.jobsRate, r.textsRate, r.seen = j, x, true
	} else {
		r.jobsRate, r.textsRate = (r.jobsRate+j)/2, (r.textsRate+x)/2
	}
	return r.jobsRate, r.textsRate, true
}
