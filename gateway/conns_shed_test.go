package gateway

import (
	"net"
	"testing"
	"time"
)

// addrConn is a connection from one address that records its close.
type addrConn struct {
	net.Conn
	from   net.Addr
	closed bool
}

func (c *addrConn) RemoteAddr() net.Addr { return c.from }
func (c *addrConn) Close() error         { c.closed = true; return nil }

// TestShedFromTheBusiestClient: at the cap, with a flood's silent
// connections from one address churning younger than a lone caller's
// connection (accepted, its request not read yet), a new connection takes
// the place of one of the flood's, not the caller's: CI once saw a
// caller's call answered EOF under TestGatewayUnderConnectionFlood.
func TestShedFromTheBusiestClient(t *testing.T) {
	l := newConns(nil, 4, 4, false, nil, nil, 0, time.Second)
	from := func(ip string) *addrConn {
		return &addrConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
	}
	caller := from("127.0.0.1")
	if !l.admit(caller) {
		t.Fatal("the caller's connection refused")
	}
	var flood []*addrConn
	for range 3 {
		c := from("127.0.0.2")
		if !l.admit(c) {
			t.Fatal("a flood connection refused below the cap")
		}
		flood = append(flood, c)
	}
	next := from("127.0.0.2")
	if !l.admit(next) {
		t.Fatal("at the cap the newcomer was refused, want a silent connection shed")
	}
	if caller.closed {
		t.Error("the lone caller's connection was shed for the flood's newcomer")
	}
	shed := 0
	for _, c := range flood {
		if c.closed {
			shed++
		}
	}
	if shed != 1 {
		t.Errorf("%d of the flood's connections shed, want its oldest", shed)
	}
	if !flood[0].closed {
		t.Error("not the flood's oldest connection shed")
	}
}
