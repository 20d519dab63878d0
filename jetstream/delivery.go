package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/schema"
)

// HeaderSubject is added to the headers of a delivery with the subject the
// job was published on, so that its dead letter can name it: the consumer
// hands the delivery's headers to [Publisher.PublishDLQ] and nothing else.
const HeaderSubject = "Embed-Subject"

// jsDelivery adapts a JetStream message to the consumer. The message itself
// is the [consumer.Message]: nats.go's Msg has Ack, Nak, NakWithDelay,
// InProgress and Term already; on a consumer with BackOff it is wrapped so
// that a NAK delay means what it says (see [backoffMsg]).
func jsDelivery(m natsjs.Msg, received time.Time, t nakTiming) *consumer.Stored {
	var delivered uint64 = 1
	var (
		stored time.Time
		stream string
		seq    uint64
	)
	if md, err := m.Metadata(); err == nil {
		if md.NumDelivered > 0 {
			delivered = md.NumDelivered
		}
		stored, stream, seq = md.Timestamp, md.Stream, md.Sequence.Stream
	}
	h := m.Headers()
	if h == nil {
		h = make(map[string][]string, 1)
	}
	setSubject(h, m.Subject())
	var msg consumer.Message = m
	if t.skewed() {
		msg = backoffMsg{Msg: m, t: t, delivered: delivered}
	}
	// m.Reply() is the ack subject, not an inbox: a stored job names its
	// reply in the body or the Embed-Reply header.
	return &consumer.Stored{
		Arrival:      consumer.Arrival{Data: m.Data(), Header: h, Subject: m.Subject(), Received: received},
		Msg:          msg,
		NumDelivered: delivered,
		StoredAt:     stored,
		Stream:       stream,
		Sequence:     seq,
	}
}

// setSubject sets [HeaderSubject] to the subject the server delivered the
// job on, dropping any the producer sent in another case: what a dead
// letter says about the job's subject is the server's word.
func setSubject(h map[string][]string, subject string) {
	for k := range h {
		if strings.EqualFold(k, HeaderSubject) {
			delete(h, k)
		}
	}
	h[HeaderSubject] = []string{subject}
}

// nakTiming is what the server mixes into a NAK delay: the consumer's
// AckWait and BackOff, and the connection to send a corrected NAK on.
type nakTiming struct {
	ackWait time.Duration
	backoff []time.Duration
	nc      *nats.Conn
}

func (t nakTiming) skewed() bool { return len(t.backoff) > 0 && t.ackWait > 0 && t.nc != nil }

// backoffMsg corrects NakWithDelay on a consumer with BackOff. nats-server
// (checked in 2.15.2, consumer.go processNak and checkPending) stores a NAK
// delay d as "delivered at now - AckWait + d" but then expires the message
// after BackOff[n-1] for delivery n, not after AckWait: from the second
// delivery on, the wait becomes d + BackOff[n-1] - AckWait, a minute or more
// with the default doubling backoff. Asking for d - (BackOff[n-1] - AckWait)
// instead, negative if need be (the server takes it as is), makes the job
// come back after d.
type backoffMsg struct {
	natsjs.Msg
	t         nakTiming
	delivered uint64
}

// NakWithDelay NAKs the message so that it is redelivered after delay.
func (m backoffMsg) NakWithDelay(delay time.Duration) error {
	i := min(int(max(m.delivered, 1))-1, len(m.t.backoff)-1)
	extra := m.t.backoff[i] - m.t.ackWait
	if extra <= 0 || delay <= 0 {
		return m.Msg.NakWithDelay(delay)
	}
	if d := delay - extra; d > 0 {
		return m.Msg.NakWithDelay(d)
	}
	// nats.go sends no delay at or below zero, so this NAK is written by
	// hand, as nats.go writes it.
	return m.t.nc.Publish(m.Reply(), fmt.Appendf(nil, `-NAK {"delay": %d}`, (delay-extra).Nanoseconds()))
}

// requestDelivery adapts a micro request. It has no JetStream message to
// acknowledge: the caller waits for the answer instead, which goes back
// through Respond. A result carrying a job-level error is sent as
// a micro error (the Nats-Service-Error headers), with the same body.
//
// The answer is flushed and checked against the connection's permission
// violations, so a reply the server refuses is reported, not lost. A
// refusal after a reconnect is not a permission problem: the right to
// answer a request on its reply inbox (allow_responses) is granted by the
// server that delivered it, on that connection, and ends with it. Such an
// answer is [ErrReplyLost], a transient failure: the requester, who got no
// answer, asks again. Which connection delivered a request is not known,
// so a refusal counts as lost when the connection reconnected after the
// request was handed over, or shortly before ([denials.mayBeStale]): a
// real refusal (no allow_responses) refuses every answer, and is reported
// as such by the next requests.
//
// tenant is the token the request's subject has after the endpoint's
// (embed.v1.embed.<tenant>), "" on the bare endpoint: the server's
// permissions let a tenant publish only to its own.
func requestDelivery(nc *nats.Conn, req micro.Request, tenant string, received time.Time) *consumer.Request {
	h := map[string][]string(req.Headers())
	if h == nil {
		h = make(map[string][]string, 1)
	}
	setSubject(h, req.Subject())
	epoch, stale := nc.Stats().Reconnects, deniedTracker(nc).mayBeStale(nc)
	return &consumer.Request{
		Arrival: consumer.Arrival{Data: req.Data(), Header: h, Subject: req.Subject(), Received: received},
		Tenant:  tenant,
		Reply:   req.Reply(),
		Respond: func(header map[string][]string, data []byte) error {
			opt := micro.WithHeaders(micro.Headers(header))
			if code := first(header, schema.HeaderErrorCode); code == string(schema.CodeOverloaded) {
				// A refusal is not confirmed: a flush (a round trip) per
				// refusal is what made a flood of them cost more than the
				// requests; nats.go's flusher sends a burst of them at once.
				return req.Error(code, code, data, opt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			defer cancel()
			err := confirmCore(ctx, nc, req.Reply(), func() error {
				if code := first(header, schema.HeaderErrorCode); code != "" {
					return req.Error(code, code, data, opt)
				}
				return req.Respond(data, opt)
			})
			if errors.Is(err, consumer.ErrPublishDenied) && (stale || nc.Stats().Reconnects != epoch) {
				return fmt.Errorf("%w: the answer to %s was refused after a reconnect (the server that delivered the request is gone)", ErrReplyLost, req.Reply())
			}
			return err
		},
	}
}

// first returns the first value of key in h.
func first(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
