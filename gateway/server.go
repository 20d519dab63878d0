package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Server is the HTTP gateway. Create it with [New], serve it with
// [Server.Serve] or mount [Server.Handler].
type Server struct {
	cfg      Config
	health   health
	metrics  *metrics
	busy     chan struct{}
	keySum   [sha256.Size]byte
	cert     *tls.Certificate
	handler  http.Handler
	window   *window
	capacity *capacity
	link     *link
	bodies   *byteBudget
	clients  clientCounts
}

// New validates cfg (with defaults applied), loads the TLS key pair and
// registers the metrics.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, busy: make(chan struct{}, cfg.MaxConcurrent), window: &window{cap: DefaultMemberTokens},
		capacity: newCapacity(), link: newLink(), bodies: &byteBudget{cap: cfg.BodyBudget}}
	s.health.pinger = cfg.Pinger
	if cfg.APIKey != "" {
		s.keySum = sha256.Sum256([]byte(cfg.APIKey))
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls key pair: %w", ErrConfig, err)
		}
		if err := checkCert(&cert, time.Now(), cfg.AllowWeakTLS, cfg.Logger); err != nil {
			return nil, err
		}
		s.cert = &cert
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.handler = s.routes()
	return s, nil
}

// TLS reports whether the server speaks HTTPS.
func (s *Server) TLS() bool { return s.cert != nil }

func (s *Server) retryAfter() int { return int((s.cfg.RetryAfter + time.Second - 1) / time.Second) }

// Handler is the gateway's routes, for tests or another server's mux.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	route := func(method, path, name string, authed bool, h http.HandlerFunc) {
		mux.Handle(path, s.metrics.instrument(name, s.only(method, authed, h)))
	}
	route(http.MethodPost, "/v1/embeddings", "embeddings", true, s.endpoint(kindDense))
	route(http.MethodPost, "/v1/rerank", "rerank-v1", true, s.rerankV1())
	route(http.MethodPost, "/v1/sparse-embeddings", "sparse-embeddings", true, s.endpoint(kindSparse))
	route(http.MethodPost, "/v1/embeddings:both", "embeddings:both", true, s.endpoint(kindBoth))
	route(http.MethodGet, "/v1/models", "models", true, s.handleModels)
	route(http.MethodGet, "/health", "health", false, s.handleHealth)
	route(http.MethodGet, "/health/deep", "health-deep", true, s.handleDeep)
	s.teiRoutes(route)
	mux.Handle("/", s.metrics.instrument("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, codeNotFound, "no endpoint %s %s (see GET /v1/models, POST /v1/embeddings, GET /info)", short(r.Method), short(r.URL.Path)), 0)
	})))
	return mux
}

// only answers 405 to other methods and 401 to calls without the API key.
func (s *Server) only(method string, authed bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, newError(http.StatusMethodNotAllowed, codeMethodNotAllowed, "%s takes %s, not %s", short(r.URL.Path), method, short(r.Method)), 0)
			return
		}
		if authed && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetembed"`)
			writeError(w, newError(http.StatusUnauthorized, codeInvalidAPIKey, "missing or wrong API key: send Authorization: Bearer <key>"), 0)
			return
		}
		h(w, r)
	}
}

// authorized compares the bearer token with the key in constant time (of
// their hashes, so the key's length does not leak either).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], s.keySum[:]) == 1
}

// Serve answers on ln until ctx ends, then shuts down gracefully: calls in
// flight get up to the call timeout to finish. It closes ln, and returns
// nil after a shutdown caused by ctx. The connections it keeps open are
// capped below the process's file limit (see [Config.MaxConns]).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	maxConns := ConnCap(s.cfg.MaxConns, fileLimit())
	perClient := s.cfg.ClientConns
	if perClient <= 0 {
		perClient = max(maxConns/2, 1)
	}
	cl := newConns(ln, maxConns, min(perClient, maxConns), s.cert != nil, s.cfg.Logger, s.metrics.refusedConn, s.cfg.MinBodyRate, min(s.cfg.HeaderTimeout, slowBodyGrace))
	errLog := slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
	srv := &http.Server{
		Handler: s.handler,
		// Bodies get a deadline sized to them when their handler reads
		// them (readBody): no ReadTimeout, which would also cut a call
		// whose body came in time.
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		WriteTimeout:      s.cfg.Timeout + 10*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ConnState:         cl.track,
		ConnContext:       cl.withConn,
		ErrorLog:          errLog,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: max(min(s.cfg.ClientConcurrent, 250), 1)},
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	if s.cert != nil {
		srv.TLSConfig = tlsConfig(*s.cert)
		go func() { errc <- srv.ServeTLS(cl, "", "") }()
	} else {
		go func() { errc <- srv.Serve(cl) }()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}
