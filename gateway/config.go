package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetembed/jetembed/schema"
)

// Requester sends one job to the fleet's request-reply endpoint and waits
// for its result, bounded by ctx. A result that carries a job-level error
// is returned together with that error, a *schema.Error. When no member of
// the service is there to answer, the error wraps [ErrNoMember]; when ctx
// ends first, it wraps ctx's error.
type Requester interface {
	Request(ctx context.Context, job *schema.Job) (*schema.Result, error)
}

// Member is what one member of the embed service says about itself.
type Member struct {
	// ID is the member's micro service instance id.
	ID string
	// Model is the model it serves, as name@sha256-prefix.
	Model   string
	Version string
	// InteractiveTokens is its interactive capacity in estimated tokens
	// ([schema.EstimateTokens]); 0 when it does not say.
	InteractiveTokens int
	// MaxTokens is the longest text it embeds, in tokens (the rest is cut
	// or refused); 0 when it does not say.
	MaxTokens int
}

// Pinger asks the embed service for one member's identity (the micro
// service $SRV.INFO request), bounded by ctx. The error wraps
// [ErrNoMember] when nothing answered.
type Pinger interface {
	Ping(ctx context.Context) (Member, error)
}

// MemberLister is what a [Pinger] may also do: list every member of the
// embed service with its capacity, so that the gateway sizes its window
// on the whole fleet. Without it the gateway counts one member.
type MemberLister interface {
	Members(ctx context.Context) ([]Member, error)
}

// ErrNoMember means no member of the embed service answered: nothing serves
// the endpoint right now.
var ErrNoMember = errors.New("no member of the embed service answered")

// Defaults of [Config].
const (
	DefaultListen        = "127.0.0.1:8081"
	DefaultMaxBodyBytes  = 8 << 20
	DefaultMaxInputs     = 2048
	DefaultJobTexts      = 32
	DefaultJobBytes      = 512 << 10
	DefaultParallel      = 4
	DefaultTimeout       = 30 * time.Second
	DefaultMaxConcurrent = 64
	DefaultColBERTBytes  = 64 << 10
	DefaultHealthWindow  = 10 * time.Second
	DefaultRetryAfter    = time.Second
	// DefaultMemberTokens is a member's interactive capacity when it does
	// not say (serve's default with one session).
	DefaultMemberTokens = 32768
	// DefaultMaxConns caps the open connections when the file limit is
	// higher; the cap always stays below the file limit.
	DefaultMaxConns = 4096
	// DefaultHeaderTimeout bounds the reading of a request's headers, and
	// is the base of its body's deadline.
	DefaultHeaderTimeout = 5 * time.Second
	// DefaultMinBodyRate is the slowest a body may arrive, in bytes a
	// second, on average after the header timeout's grace.
	DefaultMinBodyRate = 100 << 10
	// DefaultBodyBudget bounds the bytes of all request bodies being read.
	DefaultBodyBudget = 256 << 20
)

// Config configures a [Server]. Requester is required; every zero limit
// takes its default (see [Config.WithDefaults]).
type Config struct {
	Requester Requester
	// Pinger answers /health and names the served model when no call
	// has yet; nil means only answered calls count as signs of life.
	Pinger Pinger

	// APIKey, when set, is the bearer token every call but /health must
	// carry (Authorization: Bearer <key>). It is compared in constant time
	// and never logged.
	APIKey string
	// TLSCertFile and TLSKeyFile turn on HTTPS; both or neither.
	TLSCertFile, TLSKeyFile string

	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	MaxBodyBytes int64
	// MaxInputs bounds the inputs of one call; more are refused with 400.
	MaxInputs int
	// JobTexts and JobBytes bound one fleet job: a call with more inputs
	// (or more bytes of text) is split into several jobs, sent Parallel at
	// a time and reassembled in order. JobBytes must stay under the NATS
	// server's max_payload.
	JobTexts int
	JobBytes int
	Parallel int
	// MaxTextBytes bounds one input; a longer one is refused with 413
	// before it reaches the fleet.
	MaxTextBytes int
	// ColBERTBytes bounds the text of a call that asks for ColBERT
	// vectors: they take about 4 KiB a token (12 KiB in JSON), so a call
	// may not carry more than this many bytes of text (413 otherwise).
	ColBERTBytes int
	// Timeout bounds one HTTP call, all its fleet jobs included; past it
	// the call is answered 504. The jobs carry it as their deadline.
	Timeout time.Duration
	// MaxConcurrent bounds the calls in flight in this gateway, counted
	// once a call is authenticated and its body read; beyond it a call is
	// answered 429 gateway_busy with Retry-After.
	MaxConcurrent int
	// MaxConns caps the gateway's open connections; 0 means
	// [DefaultMaxConns]. It is always kept below the process's file limit
	// (RLIMIT_NOFILE) less a reserve for NATS, the ops port and files. At
	// the cap, an idle keep-alive connection is closed for the new one;
	// with none idle, the new one is answered 503 and closed.
	MaxConns int
	// ClientConns and ClientConcurrent bound the open connections and the
	// calls in progress (bodies being read included) of one client
	// address; 0 means half of the connection cap (MaxConns as the file
	// limit allows) and half of MaxConcurrent.
	ClientConns, ClientConcurrent int
	// HeaderTimeout bounds the reading of a request's headers; the body
	// then has HeaderTimeout of grace, after which every sliding window
	// of HeaderTimeout must bring MinBodyRate bytes a second (else 408
	// body_timeout). A connection whose body comes slower than that on
	// average may also be closed for a new connection at the cap.
	HeaderTimeout time.Duration
	MinBodyRate   int
	// BodyBudget bounds the bytes of all the bodies being read at once:
	// beyond it a call is answered 429 gateway_busy. Bodies take it as
	// their bytes arrive, not as their Content-Length says.
	BodyBudget int64
	// ClientBodyBudget is one client address's share of BodyBudget; 0
	// means a quarter of it (at least twice MaxBodyBytes). A client's
	// first body always fits.
	ClientBodyBudget int64
	// AllowWeakTLS starts with a certificate that is expired, not yet
	// valid, or has an RSA key under 2048 bits (logged as an error).
	AllowWeakTLS bool

	// HealthWindow is how recent a member's answer must be for /health to
	// say ok without asking again.
	HealthWindow time.Duration
	// RetryAfter is the Retry-After of 429 and 503 answers.
	RetryAfter time.Duration

	// Logger receives one line per failed call (never texts or keys); nil
	// means slog.Default().
	Logger *slog.Logger
	// Registerer receives the gateway's Prometheus metrics; nil means
	// none.
	Registerer prometheus.Registerer
}

// WithDefaults returns c with every zero or negative limit replaced by its
// default.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxInputs, DefaultMaxInputs)
	def(&c.JobTexts, DefaultJobTexts)
	def(&c.JobBytes, DefaultJobBytes)
	def(&c.Parallel, DefaultParallel)
	def(&c.MaxTextBytes, schema.DefaultMaxTextBytes)
	def(&c.MaxConcurrent, DefaultMaxConcurrent)
	def(&c.ColBERTBytes, DefaultColBERTBytes)
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HealthWindow <= 0 {
		c.HealthWindow = DefaultHealthWindow
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	def(&c.ClientConcurrent, max(c.MaxConcurrent/2, 1))
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	def(&c.MinBodyRate, DefaultMinBodyRate)
	if c.BodyBudget <= 0 {
		c.BodyBudget = max(DefaultBodyBudget, 2*c.MaxBodyBytes)
	}
	if c.ClientBodyBudget <= 0 {
		c.ClientBodyBudget = min(max(c.BodyBudget/4, 2*c.MaxBodyBytes), c.BodyBudget)
	}
	c.JobTexts = min(c.JobTexts, schema.DefaultMaxTexts)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// JobBytesFor is the [Config.JobBytes] for a NATS server whose
// max_payload is maxPayload: [DefaultJobBytes] or half the max payload,
// the smaller (a job's texts and their headers must fit one message), and
// at least 1 KiB.
func JobBytesFor(maxPayload int64) int {
	return int(min(DefaultJobBytes, max(maxPayload/2, 1024)))
}

// ErrConfig means a [Config] does not validate.
var ErrConfig = errors.New("gateway: invalid config")

// ErrInvalidConfig is the former name of [ErrConfig], kept for programs
// written against it (every package's config error is now ErrConfig).
//
// Deprecated: use ErrConfig.
var ErrInvalidConfig = ErrConfig

func (c Config) validate() error {
	switch {
	case c.Requester == nil:
		return fmt.Errorf("%w: no requester", ErrConfig)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("%w: give both a TLS certificate and its key, or neither", ErrConfig)
	}
	return nil
}
