package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// stallAfter is how long a run may go without an answer, with jobs out,
// before submit looks at the jobs consumer to say why.
const stallAfter = 3 * time.Second

// newWatch returns the status function of a bulk run on nc: the
// connection's state (disconnected, reconnecting, reconnected) when it is
// not plainly connected, else, once the run stalled, what the jobs
// consumer stream/consumer says: missing, or nobody pulling (not looked at
// when stream is "").
func newWatch(nc *nats.Conn, stream, consumer string) func(ctx context.Context, stalled time.Duration) string {
	var mu sync.Mutex
	conn := ""
	set := func(s string) {
		mu.Lock()
		conn = s
		mu.Unlock()
	}
	prevDisc, prevRec := nc.Opts.DisconnectedErrCB, nc.Opts.ReconnectedCB
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		set("disconnected from NATS, reconnecting")
		if prevDisc != nil {
			prevDisc(c, err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		set("")
		if prevRec != nil {
			prevRec(c)
		}
	})
	js, jsErr := natsjs.New(nc)
	return func(ctx context.Context, stalled time.Duration) string {
		mu.Lock()
		s := conn
		mu.Unlock()
		if s != "" || !nc.IsConnected() {
			return cmp.Or(s, "disconnected from NATS, reconnecting")
		}
		if stalled < stallAfter || jsErr != nil || stream == "" {
			return ""
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := js.Consumer(ictx, stream, consumer)
		switch {
		case errors.Is(err, natsjs.ErrConsumerNotFound), errors.Is(err, natsjs.ErrStreamNotFound):
			return fmt.Sprintf("no consumer %s/%s: provision it and start jetembed serve", stream, consumer)
		case err != nil:
			return ""
		}
		info, err := c.Info(ictx)
		if err != nil {
			return ""
		}
		if info.NumWaiting == 0 && info.NumAckPending == 0 {
			return fmt.Sprintf("waiting for a consumer on %s/%s (%d jobs queued)", stream, consumer, info.NumPending)
		}
		return ""
	}
}
