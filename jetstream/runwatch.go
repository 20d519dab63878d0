package jetstream

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

// StallAfter is how long a producer's run may go without an answer, with
// jobs out, before [RunWatch] looks at the jobs consumer to say why.
const StallAfter = 3 * time.Second

// RunWatch returns the status function of a producer's bulk run on nc
// (`jetembed submit`'s status line): the connection's state
// (disconnected, reconnecting, reconnected) when it is not plainly
// connected, else, once the run stalled for [StallAfter], what the jobs
// consumer stream/consumer says: missing, or nobody pulling (not looked at
// when stream is ""). It hooks nc's disconnect and reconnect handlers,
// calling the ones already set.
func RunWatch(nc *nats.Conn, stream, consumer string) func(ctx context.Context, stalled time.Duration) string {
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
		if stalled < StallAfter || jsErr != nil || stream == "" {
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
