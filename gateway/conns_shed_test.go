package gateway

import (
	"net"
	"net/http"
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

// TestShedNotTheBusyClientsNewcomer: at the cap, a flood of silent
// connections from as many addresses as connections (one each: an IPv6
// prefix has plenty) meets a caller with two connections, one busy with a
// call and one just accepted, its request not read yet. The caller holds
// the most connections but only one that may be shed, like every flood
// address: the newcomer takes the place of the oldest silent connection
// (the flood's), not the caller's new one. Before, the caller, holding
// the most, lost its new connection to every flood newcomer (its call
// answered EOF) while the flood's older silent connections stayed.
func TestShedNotTheBusyClientsNewcomer(t *testing.T) {
	l := newConns(nil, 4, 4, false, nil, nil, 0, time.Second)
	from := func(ip string) *addrConn {
		return &addrConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
	}
	var flood []*addrConn
	for _, ip := range []string{"2001:db8::1", "2001:db8::2"} {
		c := from(ip)
		if !l.admit(c) {
			t.Fatal("a flood connection refused below the cap")
		}
		flood = append(flood, c)
	}
	busy, fresh := from("192.0.2.7"), from("192.0.2.7")
	if !l.admit(busy) {
		t.Fatal("the caller's first connection refused")
	}
	l.track(busy, http.StateActive)
	if !l.admit(fresh) {
		t.Fatal("the caller's second connection refused")
	}
	if !l.admit(from("2001:db8::3")) {
		t.Fatal("at the cap the newcomer was refused, want a silent connection shed")
	}
	if fresh.closed || busy.closed {
		t.Errorf("the caller's connection shed (busy %v, just accepted %v) for a flood newcomer, with the flood's older silent connections open", busy.closed, fresh.closed)
	}
	if !flood[0].closed {
		t.Error("the flood's oldest silent connection not shed")
	}
}
