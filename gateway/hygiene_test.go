package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/gateway"
)

// dialFrom connects to addr from the loopback address local (127.0.0.2
// is another client than 127.0.0.1 to the gateway's per-client limits).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trickle sends the headers of a POST with a body of n bytes, then one
// byte every every until stop is closed or the write fails.
func trickle(c net.Conn, host string, n int, every time.Duration, stop <-chan struct{}) {
	fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", host, n)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if _, err := c.Write([]byte(" ")); err != nil {
			return
		}
	}
}

// TestSlowBodiesHoldNoSlot is reproduction 3 of issue 24: 64 connections
// trickling a 1 MiB body (no API key set) used to hold every concurrency
// slot, each taken before its body was read, and every other call was
// answered 429 gateway_busy for the 30 s of the read timeout. Now a slot
// is taken once the body is in, a client may hold only its share of calls
// in progress, and the others' calls are answered at once.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	r := newRig(t, true, nil)
	addr := strings.TrimPrefix(r.url, "http://")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for range gateway.DefaultMaxConcurrent {
		c := dialFrom(t, "127.0.0.2", addr)
		wg.Go(func() { trickle(c, addr, 1<<20, 500*time.Millisecond, stop) })
	}
	time.Sleep(300 * time.Millisecond) // the trickles are all in their bodies
	for i := range 5 {
		start := time.Now()
		a := r.post(t, "/v1/embeddings", `{"input":"a legitimate call"}`)
		if a.status != 200 {
			t.Fatalf("call %d during the trickle: %d %s", i, a.status, a.body)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("call %d took %s", i, took)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSlowBodyDeadline: a body that comes slower than MinBodyRate after
// the header timeout's grace is answered 408 body_timeout and its
// connection closed; one that keeps the pace is read.
func TestSlowBodyDeadline(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.HeaderTimeout, c.MinBodyRate = 300*time.Millisecond, 1000 })
	addr := strings.TrimPrefix(r.url, "http://")
	c := dialFrom(t, "127.0.0.1", addr)
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	// 2000 bytes may take 0.3 + 2 s; at a byte every 50 ms they take 100 s.
	go trickle(c, addr, 2000, 50*time.Millisecond, stop)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_timeout") || took > 4*time.Second {
		t.Errorf("a trickled body: %d %s after %s", resp.StatusCode, body, took)
	}
	if a := r.post(t, "/v1/embeddings", `{"input":"`+strings.Repeat("x", 1500)+`"}`); a.status != 200 {
		t.Errorf("a body at full speed: %d %s", a.status, a.body)
	}
}

// TestBodyBurstThenSilence: the body's deadline follows the bytes that
// came, over a sliding window of HeaderTimeout: a burst at the start buys
// one window, not its length at MinBodyRate (64 KiB at 1000 B/s used to
// be 65 s), and a declared length buys nothing.
func TestBodyBurstThenSilence(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.HeaderTimeout, c.MinBodyRate = 500*time.Millisecond, 1000 })
	addr := strings.TrimPrefix(r.url, "http://")
	for _, sent := range []int{0, 64 << 10} {
		c := dialFrom(t, "127.0.0.1", addr)
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{%s", addr, 1<<20, strings.Repeat(" ", sent))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%d bytes then silence: %v", sent, err)
		}
		body, _ := io.ReadAll(resp.Body)
		took := time.Since(start)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_timeout") || took > 3*time.Second {
			t.Errorf("%d bytes of a declared 1 MiB, then silence: %d %s after %s", sent, resp.StatusCode, body, took)
		}
	}
	// A body that keeps the pace past many windows is read. Its own
	// gateway has a window of a second, and the body comes at five times
	// the minimum rate: at twice the rate over 500 ms windows a loaded
	// machine that held the writer (or the reader) a few hundred ms made
	// it late (CI: 1800 bytes in 1.312s, 408).
	r = newRig(t, true, func(c *gateway.Config) { c.HeaderTimeout, c.MinBodyRate = time.Second, 1000 })
	addr = strings.TrimPrefix(r.url, "http://")
	c := dialFrom(t, "127.0.0.1", addr)
	const n = 17500
	go func() {
		fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, n)
		part := `{"input":"` + strings.Repeat("x", n-12) + `"}`
		for i := 0; i < len(part); i += 500 {
			_, _ = c.Write([]byte(part[i:min(i+500, len(part))]))
			time.Sleep(100 * time.Millisecond) // 5000 B/s for 3.5 s: past three windows
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Errorf("a body at five times the minimum rate for 3.5 windows: %d %s", resp.StatusCode, body)
	}
}

// TestClientBodyShare: one client address takes at most its share of the
// body budget (ClientBodyBudget); past it its bodies are answered 429
// client_busy, and the budget stays open to the others. The client's
// bodies have really sent their bytes: the budget follows what came.
func TestClientBodyShare(t *testing.T) {
	const kib = 1 << 10
	r := newRig(t, true, func(c *gateway.Config) {
		c.MaxBodyBytes, c.BodyBudget, c.ClientBodyBudget = 256*kib, 640*kib, 200*kib
		c.HeaderTimeout = time.Second // the one body let in ends then
	})
	addr := strings.TrimPrefix(r.url, "http://")
	// Four bodies of 100 KiB sent of 256 KiB declared would hold 640 KiB
	// (the buffers grow 16, 80, 160 KiB), the whole budget.
	answers := make(chan int, 4)
	for range 4 {
		c := dialFrom(t, "127.0.0.2", addr)
		fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{%s", addr, 256*kib, strings.Repeat(" ", 100*kib))
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- 0
				return
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == 429 && !strings.Contains(string(body), "client_busy") {
				t.Errorf("a body past the client's share: %d %s", resp.StatusCode, body)
			}
			answers <- resp.StatusCode
		}()
	}
	time.Sleep(300 * time.Millisecond) // every body is in
	if a := r.post(t, "/v1/embeddings", `{"input":"another client"}`); a.status != 200 {
		t.Errorf("another client while one holds its share of the body budget: %d %s", a.status, a.body)
	}
	refused := 0
	for range 4 {
		if <-answers == 429 {
			refused++
		}
	}
	if refused < 3 {
		t.Errorf("%d of 4 bodies over the client's share refused, want 3", refused)
	}
}

// TestClientLimits: one client address may have ClientConcurrent calls in
// progress (bodies being read included) and ClientConns connections; the
// others are not affected.
func TestClientLimits(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.ClientConcurrent, c.ClientConns = 2, 3 })
	addr := strings.TrimPrefix(r.url, "http://")
	stop := make(chan struct{})
	defer close(stop)
	for range 2 {
		c := dialFrom(t, "127.0.0.2", addr)
		go trickle(c, addr, 1<<20, 200*time.Millisecond, stop)
	}
	time.Sleep(200 * time.Millisecond)
	third := dialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(third, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"input\":\"a\"}", addr)
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !strings.Contains(string(body), "client_busy") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a third call of the client: %d %s", resp.StatusCode, body)
	}
	// A fourth connection of that client: the third is idle after its
	// answer, and closed for the fourth.
	time.Sleep(100 * time.Millisecond)
	fourth := dialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(fourth, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if resp, err := http.ReadResponse(bufio.NewReader(fourth), nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("a fourth connection, the third idle: %v %v", resp, err)
	}
	fifth := dialFrom(t, "127.0.0.2", addr)
	_ = fifth.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(fifth), nil)
	if err == nil {
		body, _ = io.ReadAll(resp.Body)
	}
	// The fourth is idle again now: it is the one closed, or the fifth is
	// refused; either way the client stays at three.
	if err == nil && (resp.StatusCode != 503 || !strings.Contains(string(body), "too_many_connections")) {
		t.Errorf("a fifth connection: %d %s", resp.StatusCode, body)
	}
	if a := r.post(t, "/v1/embeddings", `{"input":"another client"}`); a.status != 200 {
		t.Errorf("another client: %d %s", a.status, a.body)
	}
}

// TestConnectionCap: at the cap a new connection takes the place of the
// oldest idle keep-alive one, of a connection that sent nothing for a
// second, or of one whose body comes slower than the minimum rate; with
// every connection busy (bodies at a good pace) it is answered 503 at
// once.
func TestConnectionCap(t *testing.T) {
	const maxConns = 6
	r := newRig(t, true, func(c *gateway.Config) { c.MaxConns, c.ClientConns = maxConns, 100 })
	addr := strings.TrimPrefix(r.url, "http://")
	for range maxConns {
		c := dialFrom(t, "127.0.0.2", addr)
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 3 {
		if a := r.post(t, "/v1/embeddings", `{"input":"past the idle ones"}`); a.status != 200 {
			t.Fatalf("call %d with %d idle keep-alive connections open: %d %s", i, maxConns, a.status, a.body)
		}
		http.DefaultClient.CloseIdleConnections()
	}
	// Silent connections: shed, oldest first, once no keep-alive is idle.
	for range maxConns {
		dialFrom(t, "127.0.0.3", addr)
	}
	time.Sleep(100 * time.Millisecond) // accepted
	if a := r.post(t, "/v1/embeddings", `{"input":"past the silent ones"}`); a.status != 200 {
		t.Fatalf("a call with silent connections open: %d %s", a.status, a.body)
	}
	http.DefaultClient.CloseIdleConnections()
	// Connections whose bodies come slower than the minimum rate: shed
	// too (the oldest first), once nothing is idle and they had their
	// grace; until then new trickles push out the silent connections,
	// not each other.
	stop := make(chan struct{})
	defer close(stop)
	for range maxConns {
		c := readingFrom(t, "127.0.0.4", addr, 1<<20)
		go send(c, 1, 100*time.Millisecond, stop)
	}
	time.Sleep(1200 * time.Millisecond) // past the grace (a second)
	if a := r.post(t, "/v1/embeddings", `{"input":"past the trickles"}`); a.status != 200 {
		t.Fatalf("a call with trickling connections open: %d %s", a.status, a.body)
	}
	http.DefaultClient.CloseIdleConnections()
	// Busy connections, their bodies at a good pace (or just begun):
	// nothing to shed.
	for range maxConns {
		c := readingFrom(t, "127.0.0.5", addr, 8<<20)
		go send(c, 32<<10, 100*time.Millisecond, stop)
	}
	c := dialFrom(t, "127.0.0.1", addr)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a connection past the cap: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"too_many_connections"`) {
		t.Errorf("a connection past the cap: %d %s", resp.StatusCode, body)
	}
}

// readingFrom connects from local and sends the headers of a POST of a
// body of n bytes that expects 100-continue, and returns the connection
// once the gateway's handler reads the body (which sends the 100): from
// then on the connection is reading a body, whatever the machine's load.
// A connection refused at the cap (the previous call's connection not yet
// let go by the server) is tried again, as a client would.
func readingFrom(t *testing.T, local, addr string, n int) net.Conn {
	t.Helper()
	for try := 0; ; try++ {
		c := dialFrom(t, local, addr)
		fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, n)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		_ = c.SetReadDeadline(time.Time{})
		if err == nil && strings.HasPrefix(line, "HTTP/1.1 100") {
			return c
		}
		c.Close()
		if try == 50 || err != nil || !strings.HasPrefix(line, "HTTP/1.1 503") {
			t.Fatalf("the body is not read: %q %v", line, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// send writes chunk bytes of body every every until stop is closed or the
// write fails.
func send(c net.Conn, chunk int, every time.Duration, stop <-chan struct{}) {
	part := []byte("{" + strings.Repeat(" ", chunk-1))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := c.Write(part); err != nil {
			return
		}
		part[0] = ' '
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// TestFleetOutageFailsFast: while the gateway's connection to the fleet is
// down a call is answered 503 fleet_unreachable with Retry-After at once,
// and a call in flight when it drops is answered then, not at its
// timeout.
func TestFleetOutageFailsFast(t *testing.T) {
	r := newRig(t, true, nil)
	got := make(chan answer, 1)
	start := time.Now()
	go func() { got <- r.post(t, "/v1/embeddings", `{"input":"slow"}`) }()
	time.Sleep(300 * time.Millisecond)
	r.gw.SetConnected(false)
	a := <-got
	if took := time.Since(start); a.status != 503 || a.errField("code") != "fleet_unreachable" || a.header.Get("Retry-After") == "" || took > time.Second {
		t.Errorf("in flight at the outage: %d %s after %s", a.status, a.body, took)
	}
	start = time.Now()
	if a := r.post(t, "/v1/embeddings", `{"input":"a"}`); a.status != 503 || a.errField("code") != "fleet_unreachable" || time.Since(start) > 200*time.Millisecond {
		t.Errorf("during the outage: %d %s", a.status, a.body)
	}
	if a := r.do(t, http.MethodGet, "/health", ""); a.status != 503 || !strings.Contains(string(a.body), "no connection to NATS") {
		t.Errorf("/health during the outage: %d %s", a.status, a.body)
	}
	r.gw.SetConnected(true)
	if a := r.post(t, "/v1/embeddings", `{"input":"a"}`); a.status != 200 {
		t.Errorf("after the outage: %d %s", a.status, a.body)
	}
}
