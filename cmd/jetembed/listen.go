package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// exitListen is the exit status when an address the command was asked
// to listen on cannot be bound (a port in use, a privileged port, an
// address not of this host). 69 is EX_UNAVAILABLE.
const exitListen = 69

// listener is one address a command listens on and the flag that sets it.
type listener struct {
	flag, addr string
}

// listenError is a listener that could not bind: main prints it as one
// line naming the flag and the address, and exits [exitListen].
type listenError struct {
	listener
	err error
}

func (e *listenError) Error() string {
	return fmt.Sprintf("--%s %s: %s (choose another address with --%s)", e.flag, e.addr, bindCause(e.err), e.flag)
}

func (e *listenError) Unwrap() error { return e.err }

// bindCause is why a bind failed, without net's "listen tcp ADDR: bind:"
// prefix that repeats the address.
func bindCause(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "address already in use: another process listens there (a jetembed dev or serve already running?)"
	case errors.Is(err, syscall.EACCES):
		return "permission denied (ports below 1024 need privileges)"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "address not available on this host"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// checkListeners binds every listener's address (those not empty) and
// closes them again, so that an address that cannot be bound fails the
// command at start, before it loads a model or connects, with the flag
// named. All are held until the last is bound, so two flags given the
// same address fail too. The process binds each again when it starts the
// server (Go's listeners set SO_REUSEADDR, so the port is free again at
// once).
func checkListeners(ls ...listener) error {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for _, l := range ls {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return &listenError{listener: l, err: err}
		}
		held = append(held, ln)
	}
	return nil
}
