package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/schema"
)

// Gateway compares the HTTP gateway with bare request-reply on the same
// worker, in one run: each figure alternates the two, so both see the same
// machine.
type Gateway struct {
	// Calls is how many sequential calls of each kind the latencies have.
	Calls int
	// BareP50, BareP99 are request-reply of the short text through the Go
	// client; HTTPP50, HTTPP99 the same text as POST /v1/embeddings through
	// a gateway in front of the same service.
	BareP50, BareP99, HTTPP50, HTTPP99 time.Duration
	// Callers is how many callers at once the throughput figures have;
	// BareRate and HTTPRate are their calls a second.
	Callers            int
	BareRate, HTTPRate float64
	// Failed counts calls answered anything but vectors (not in the
	// figures).
	Failed int
}

// Added is the latency the gateway adds to request-reply.
func (g Gateway) Added() (p50, p99 time.Duration) {
	return g.HTTPP50 - g.BareP50, g.HTTPP99 - g.BareP99
}

// Ratio is the gateway's calls a second over bare request-reply's.
func (g Gateway) Ratio() float64 { return ratio(g.HTTPRate, g.BareRate) }

// gatewayCallers and gatewaySpell size the throughput figures.
const (
	gatewayCallers = 16
	gatewaySpell   = 2 * time.Second
)

// benchFleet is the gateway's view of the fleet through the producer
// client, as cmd/jetembed wires it.
type benchFleet struct{ c *client.Client }

func (f benchFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	return f.c.Request(ctx, job)
}

// gatewayBench runs a worker on e, a gateway in front of it on a loopback
// port, and times both ways of asking.
func gatewayBench(ctx context.Context, e *engine.Engine, cc consumer.Config, n int) (Gateway, error) {
	g := Gateway{Calls: n, Callers: gatewayCallers}
	err := withNATS(ctx, func(env *natsEnv) error {
		stop, err := env.startWorker(ctx, e, cc)
		if err != nil {
			return err
		}
		defer stop()
		gw, err := gateway.New(gateway.Config{Requester: benchFleet{env.client}, Logger: quiet})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		sctx, stopGW := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- gw.Serve(sctx, ln) }()
		defer func() { stopGW(); <-served }()
		url := "http://" + ln.Addr().String() + "/v1/embeddings"
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * gatewayCallers}}
		body, _ := json.Marshal(map[string]string{"input": shortText})
		bare := func(ctx context.Context) bool {
			res, err := env.client.Embed(ctx, shortText)
			return err == nil && res != nil && len(res.Items) == 1
		}
		viaHTTP := func(ctx context.Context) bool {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		for range 5 { // warm both paths
			bare(ctx)
			viaHTTP(ctx)
		}
		var db, dh []time.Duration
		for range n {
			for _, way := range []struct {
				call func(context.Context) bool
				d    *[]time.Duration
			}{{bare, &db}, {viaHTTP, &dh}} {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				start := time.Now()
				ok := way.call(cctx)
				cancel()
				if !ok {
					g.Failed++
					continue
				}
				*way.d = append(*way.d, time.Since(start))
			}
		}
		if len(db) == 0 || len(dh) == 0 {
			return fmt.Errorf("gateway bench: %d calls failed", g.Failed)
		}
		slices.Sort(db)
		slices.Sort(dh)
		g.BareP50, g.BareP99 = percentile(db, 0.5), percentile(db, 0.99)
		g.HTTPP50, g.HTTPP99 = percentile(dh, 0.5), percentile(dh, 0.99)
		// Throughput: two spells of each, alternating; each keeps its best.
		for range 2 {
			g.BareRate = max(g.BareRate, callRate(ctx, bare, &g.Failed))
			g.HTTPRate = max(g.HTTPRate, callRate(ctx, viaHTTP, &g.Failed))
		}
		return nil
	})
	return g, err
}

// callRate is how many calls a second gatewayCallers callers make during
// gatewaySpell.
func callRate(ctx context.Context, call func(context.Context) bool, failed *int) float64 {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(gatewaySpell)
	for range gatewayCallers {
		wg.Go(func() {
			for time.Now().Before(end) {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if call(cctx) {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	*failed += int(bad.Load())
	return float64(ok.Load()) / time.Since(start).Seconds()
}
