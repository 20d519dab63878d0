package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultListen is where [Start] listens by default.
const DefaultListen = "127.0.0.1:4222"

// readyTimeout bounds the start of the dev server, including the
// recovery of an existing JetStream store.
const readyTimeout = 10 * time.Second

// maxPayload lets a development server carry the large results of
// ColBERT outputs; the nats-server default is 1 MiB.
const maxPayload = 8 << 20

// Options configure [Start].
type Options struct {
	// Listen is host:port for clients; empty means [DefaultListen].
	// Port 0 or -1 picks a free port.
	Listen string
	// DataDir holds the JetStream file store; it survives restarts.
	DataDir string
	// Logger receives the server's log lines; nil keeps the server quiet
	// except for the error that stops it from starting.
	Logger *slog.Logger
}

// Start starts an embedded nats-server with JetStream stored in
// DataDir and returns it once it accepts connections. The caller shuts it
// down with Shutdown and WaitForShutdown. It is for development and tests;
// production runs a real NATS cluster.
func Start(o Options) (*server.Server, error) {
	listen := o.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("dev server: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("dev server: listen address %q: bad port", listen)
	}
	if port == 0 {
		port = -1 // nats-server's "any free port"; 0 would mean its default 4222
	}
	if o.DataDir == "" {
		return nil, errors.New("dev server: no data directory")
	}
	opts := &server.Options{
		ServerName: "jetembed-dev",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.DataDir,
		MaxPayload: maxPayload,
		NoSigs:     true, // the command handles SIGINT/SIGTERM itself
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("dev server: %w", err)
	}
	logger := &slogAdapter{log: o.Logger, fatal: make(chan string, 1)}
	s.SetLoggerV2(logger, false, false, false)
	go s.Start()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-logger.fatal:
			s.Shutdown()
			return nil, fmt.Errorf("dev server on %s: %s", listen, msg)
		case <-ctx.Done():
			s.Shutdown()
			return nil, fmt.Errorf("dev server on %s: not ready within %v", listen, readyTimeout)
		default:
		}
	}
	return s, nil
}

// slogAdapter is a nats-server Logger writing to slog. It also catches the
// fatal error of a failed start (such as a port in use), which nats-server
// would otherwise only log.
type slogAdapter struct {
	log   *slog.Logger
	fatal chan string
}

func (l *slogAdapter) emit(level slog.Level, format string, v []any) {
	if l.log != nil {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
	}
}

func (l *slogAdapter) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *slogAdapter) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *slogAdapter) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *slogAdapter) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }
func (l *slogAdapter) Tracef(format string, v ...any)  { l.emit(slog.LevelDebug-4, format, v) }

func (l *slogAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.emit(slog.LevelError, "%s", []any{msg})
	select {
	case l.fatal <- msg:
	default:
	}
}
