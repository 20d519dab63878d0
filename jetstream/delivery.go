package jetstream

import (
	"time"

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
// InProgress and Term already.
func jsDelivery(m natsjs.Msg, received time.Time) consumer.Delivery {
	var delivered uint64 = 1
	var stored time.Time
	if md, err := m.Metadata(); err == nil {
		if md.NumDelivered > 0 {
			delivered = md.NumDelivered
		}
		stored = md.Timestamp
	}
	h := m.Headers()
	if h == nil {
		h = make(map[string][]string, 1)
	}
	h[HeaderSubject] = []string{m.Subject()}
	return consumer.Delivery{
		Msg:          m,
		Data:         m.Data(),
		Header:       h,
		NumDelivered: delivered,
		// m.Reply() is the ack subject, not an inbox: a stored job names
		// its reply in the body or the Embed-Reply header.
		Received: received,
		Stored:   stored,
	}
}

// requestDelivery adapts a micro request. It has no JetStream message to
// acknowledge (Msg is nil): the caller waits for the answer instead, which
// goes back through Respond. A result carrying a job-level error is sent as
// a micro error, so `nats micro stats` counts it, with the same body.
func requestDelivery(req micro.Request, received time.Time) consumer.Delivery {
	h := map[string][]string(req.Headers())
	if h == nil {
		h = make(map[string][]string, 1)
	}
	h[HeaderSubject] = []string{req.Subject()}
	return consumer.Delivery{
		Data:         req.Data(),
		Header:       h,
		NumDelivered: 1,
		Reply:        req.Reply(),
		Received:     received,
		Respond: func(header map[string][]string, data []byte) error {
			opt := micro.WithHeaders(micro.Headers(header))
			if code := first(header, schema.HeaderErrorCode); code != "" {
				return req.Error(code, code, data, opt)
			}
			return req.Respond(data, opt)
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
