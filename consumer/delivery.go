package consumer

import (
	"time"

	"github.com/jetembed/jetembed/schema"
)

// Delivery is one job as it arrived through one of the loop's two doors:
// a job the stream stored ([*Stored]: ACKed, NAKed or TERMed when
// settled, redelivered by the server) or a request a caller waits on
// ([*Request]: answered, never redelivered). [Loop.Submit] takes either;
// package jetstream builds them from a JetStream message or a micro
// request, and serve's HTTP API builds in-process requests.
type Delivery interface {
	arrival() *Arrival
}

// Arrival is what every delivery carries: the payload as it arrived and
// where it came from.
type Arrival struct {
	Data   []byte
	Header map[string][]string
	// Subject is the subject the job was published on. A stored job's
	// tenant is read from it (see [schema.Tenancy]): the server's
	// permissions vouch for the subject, nothing vouches for the body.
	Subject string
	// Received is when the delivery reached this process; InProgress
	// heartbeats count from it.
	Received time.Time
}

func (a *Arrival) arrival() *Arrival { return a }

// Message is the acknowledgement side of a stored job. nats.go's
// jetstream.Msg satisfies it.
type Message interface {
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
	Term() error
}

// Stored is a job the stream stored: its message is settled exactly once,
// and heartbeated (InProgress) while the loop holds it.
type Stored struct {
	Arrival
	Msg Message
	// NumDelivered is the JetStream delivery count (1 on first delivery).
	NumDelivered uint64
	// StoredAt, when known, is when the stream stored the message (the
	// JetStream metadata timestamp): the queue wait metric counts from
	// it, else from Received.
	StoredAt time.Time
	// Stream and Sequence are the stream that stores the job and its
	// sequence there: a redelivery has the same, the same job published
	// again its own. They are the identity of the job's usage record
	// ([UsageRecorder]), so that a job is counted once however often it
	// is delivered, and a producer cannot have two jobs counted as one.
	Stream   string
	Sequence uint64
	// Reply is the core reply inbox the job came with, when its
	// transport keeps one (a JetStream message does not: its reply is
	// the ack subject), used when the job names no reply subject.
	Reply string
}

// Request is a request-reply call: its caller waits for the answer,
// which goes back through Respond (or Answer); there is no message to
// acknowledge and no redelivery. Its texts run in the interactive class.
type Request struct {
	Arrival
	// Tenant is the tenant the request's subject names
	// (embed.v1.embed.<tenant>), "" on the service's bare subject.
	Tenant string
	// Reply is the caller's inbox: checked against the reply policy (an
	// inbox outside the tenant's space gets no answer at all).
	Reply string
	// Job, when set, is the job already decoded (a request made inside
	// this process: serve's HTTP API); Data is then not read.
	Job *schema.Job
	// Respond sends the answer, encoded as the wire result. A request
	// with Answer need not set it.
	Respond func(header map[string][]string, data []byte) error
	// Answer, when set, takes the whole result instead of the wire
	// result: the rerank endpoint answers scores this way, and the
	// in-process API the result itself, so the vectors are never encoded
	// (and no payload limit or blob applies when Local). When it returns
	// data, Respond sends it. It gets error results too.
	Answer func(res *schema.Result) (header map[string][]string, data []byte)
	// Local marks a request made inside this process (the HTTP API of
	// serve): its answer never travels as a message, so the server's max
	// payload does not bound it and no blob is stored.
	Local bool
	// Refusal, when set, is the endpoint's own refusal of a request it
	// decoded itself (a rerank request that is no rerank request, a
	// request whose reply the endpoint may not answer): Data is not
	// decoded as a job, and the request is settled with this error after
	// the tenant and reply checks, which come first as for any job (a
	// refused reply is bad_reply: no answer, a dead letter). Bad input
	// gets its dead letter and its answer (through Answer when set).
	Refusal *schema.Error
	// Settled, when set, is called once when the loop has settled the
	// request (answered it, or refused it without an answer): a quota's
	// charge is given back there.
	Settled func()

	// witness, set by this package's tests only, records the verdict the
	// request got as a stored job's message would (a request has none).
	witness Message
}
