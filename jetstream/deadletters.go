package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/schema"
)

// ErrNotReplayable means a dead letter cannot be replayed: it keeps only an
// excerpt of its job, it is an advisory, its body does not match its
// digest, or the job did not come from the jobs stream. The error says
// which.
var ErrNotReplayable = errors.New("dead letter not replayable")

// Letter is one message of the dead-letter stream: a copy of a terminated
// job with its reason ([Publisher.PublishDLQ]), or a max-deliveries
// advisory of the server.
type Letter struct {
	Seq     uint64
	Time    time.Time
	Subject string // where it is stored: <dlq prefix>.<code>[.<tenant>], or the advisory's
	Header  nats.Header
	Data    []byte

	// Code, Message, JobID and Delivered are the reason headers; for an
	// advisory, Code is "max_deliveries", JobID the job's stream sequence
	// and Delivered its deliveries.
	Code, Message, JobID string
	Delivered            uint64
	// JobSubject is the subject the job was published on.
	JobSubject string
	// Size and SHA256 describe the job's body as it arrived (0 and "" on
	// letters written before they were recorded); Excerpt is set when the
	// letter keeps only the start of the job.
	Size     int
	SHA256   string
	Excerpt  bool
	Advisory bool
}

// letterOf reads a stored message of the dead-letter stream.
func letterOf(seq uint64, at time.Time, subject string, h nats.Header, data []byte) Letter {
	l := Letter{Seq: seq, Time: at, Subject: subject, Header: h, Data: data}
	if strings.HasPrefix(subject, "$JS.EVENT.ADVISORY.") {
		l.Advisory, l.Code = true, "max_deliveries"
		var a struct {
			Stream     string `json:"stream"`
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries uint64 `json:"deliveries"`
		}
		if json.Unmarshal(data, &a) == nil {
			l.JobID, l.Delivered = fmt.Sprintf("%s seq %d", a.Stream, a.StreamSeq), a.Deliveries
		}
		return l
	}
	l.Code, l.Message, l.JobID = h.Get(HeaderDLQCode), h.Get(HeaderDLQMessage), h.Get(HeaderDLQJobID)
	l.Delivered, _ = strconv.ParseUint(h.Get(HeaderDLQDelivered), 10, 64)
	l.JobSubject = h.Get(HeaderSubject)
	l.Size, _ = strconv.Atoi(h.Get(HeaderDLQSize))
	l.SHA256 = h.Get(HeaderDLQSHA256)
	l.Excerpt = h.Get(HeaderDLQExcerpt) == "true"
	return l
}

// ID is the letter's identity: its Nats-Msg-Id (a hash of the job and the
// code), else the stream sequence.
func (l Letter) ID() string {
	if id := l.Header.Get(schema.HeaderMsgID); id != "" {
		return id
	}
	return "seq-" + strconv.FormatUint(l.Seq, 10)
}

// Replayable returns nil if the letter holds the whole job as it arrived,
// else an error wrapping [ErrNotReplayable] that says why.
func (l Letter) Replayable() error {
	switch {
	case l.Advisory:
		return fmt.Errorf("%w: seq %d is a max-deliveries advisory of %s, not a copy of the job", ErrNotReplayable, l.Seq, l.JobID)
	case l.Excerpt:
		return fmt.Errorf("%w: seq %d (%s) keeps only an excerpt of the job (%d of %d bytes): a job that can never succeed is not kept whole", ErrNotReplayable, l.Seq, l.Code, len(l.Data), l.Size)
	case l.JobSubject == "" || strings.ContainsAny(l.JobSubject, "*> \t\r\n"):
		return fmt.Errorf("%w: seq %d names no job subject", ErrNotReplayable, l.Seq)
	}
	if l.SHA256 != "" {
		sum := sha256.Sum256(l.Data)
		if hex.EncodeToString(sum[:]) != l.SHA256 || l.Size != len(l.Data) {
			return fmt.Errorf("%w: seq %d: the body (%d bytes) does not match its recorded size and SHA-256", ErrNotReplayable, l.Seq, len(l.Data))
		}
	}
	return nil
}

// DeadLetters is a deployment's dead-letter stream, as `jetembed dlq`
// lists, shows, replays and deletes its letters.
type DeadLetters struct {
	js     natsjs.JetStream
	stream string
}

// OpenDeadLetters is the dead-letter stream named stream on nc (nothing is
// asked of the server yet).
func OpenDeadLetters(nc *nats.Conn, stream string) (*DeadLetters, error) {
	js, err := New(nc)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{js: js, stream: stream}, nil
}

// Letters yields the letters, oldest first, through an ordered consumer,
// and stops once it has read what was stored; code, when not empty, keeps
// the letters of that code only (their subject).
func (d *DeadLetters) Letters(ctx context.Context, code string) iter.Seq2[Letter, error] {
	js, stream := d.js, d.stream
	return func(yield func(Letter, error) bool) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
			return
		}
		cc := natsjs.OrderedConsumerConfig{}
		if code != "" {
			// A code's letters: <prefix><code> (no tenant) and
			// <prefix><code>.<tenant>.
			base := dlqPrefix(s.CachedInfo().Config.Subjects) + subjectToken(code)
			cc.FilterSubjects = []string{base, base + ".>"}
		}
		// Nothing stored (under the code's subjects): nothing to wait for.
		filters := cc.FilterSubjects
		if len(filters) == 0 {
			filters = []string{""}
		}
		stored := false
		for _, f := range filters {
			var opts []natsjs.StreamInfoOpt
			if f != "" {
				opts = append(opts, natsjs.WithSubjectFilter(f))
			}
			info, err := s.Info(ctx, opts...)
			if err != nil {
				yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
				return
			}
			stored = stored || info.State.Msgs > 0 && (f == "" || len(info.State.Subjects) > 0)
		}
		if !stored {
			return
		}
		cons, err := js.OrderedConsumer(ctx, stream, cc)
		if err != nil {
			yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
			return
		}
		it, err := cons.Messages()
		if err != nil {
			yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
			return
		}
		defer it.Stop()
		for {
			m, err := it.Next(natsjs.NextContext(ctx))
			if err != nil {
				yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				yield(Letter{}, fmt.Errorf("dead letters in %s: %w", stream, err))
				return
			}
			if !yield(letterOf(md.Sequence.Stream, md.Timestamp, m.Subject(), m.Headers(), m.Data()), nil) || md.NumPending == 0 {
				return
			}
		}
	}
}

// Get reads the letter at seq.
func (d *DeadLetters) Get(ctx context.Context, seq uint64) (Letter, error) {
	stream := d.stream
	s, err := d.js.Stream(ctx, stream)
	if err != nil {
		return Letter{}, fmt.Errorf("dead letter %d in %s: %w", seq, stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return Letter{}, fmt.Errorf("dead letter %d in %s: %w", seq, stream, err)
	}
	return letterOf(m.Sequence, m.Time, m.Subject, m.Header, m.Data), nil
}

// Delete removes the letter at seq from the stream.
func (d *DeadLetters) Delete(ctx context.Context, seq uint64) error {
	stream := d.stream
	s, err := d.js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("dead letter %d in %s: %w", seq, stream, err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("dead letter %d in %s: %w", seq, stream, err)
	}
	return nil
}

// Replayer republishes dead letters' jobs to the jobs stream.
type Replayer struct {
	js       natsjs.JetStream
	stream   string
	subjects []string
}

// Replayer returns a [Replayer] of the letters into the jobs stream named
// stream.
func (d *DeadLetters) Replayer(ctx context.Context, stream string) (*Replayer, error) {
	s, err := d.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("jobs stream %s: %w", stream, err)
	}
	return &Replayer{js: d.js, stream: stream, subjects: s.CachedInfo().Config.Subjects}, nil
}

// Replay publishes l's job again, as it arrived: its body and headers to
// the subject it was published on, so it runs as the same producer's job.
// The copy's own headers (Embed-Dlq-*, Embed-Subject) are dropped, and so
// is every Nats-* header: the job's original Nats-Msg-Id would have the
// stream drop the replay within its duplicate window (were it kept), and an
// expectation would refuse it. Instead the replay carries
// Nats-Msg-Id "replay:<letter id>", so replaying one letter twice queues it
// once, and Embed-Replay: <letter id>, which gives its result and any new
// dead letter an identity of their own (the results stream would otherwise
// drop the result as a repeat of the first run's error result). A letter
// that is not [Letter.Replayable], or whose subject is not the jobs
// stream's (a request-reply job: its caller is gone), is refused with
// [ErrNotReplayable].
func (r *Replayer) Replay(ctx context.Context, l Letter) (*natsjs.PubAck, error) {
	if err := l.Replayable(); err != nil {
		return nil, err
	}
	if !matchesAny(r.subjects, l.JobSubject) {
		return nil, fmt.Errorf("%w: seq %d came on %s, not a subject of the jobs stream %s (a request-reply job: its caller is gone)", ErrNotReplayable, l.Seq, l.JobSubject, r.stream)
	}
	h := make(nats.Header, len(l.Header))
	for k, v := range l.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "embed-dlq-") ||
			lk == strings.ToLower(HeaderSubject) || lk == strings.ToLower(schema.HeaderReplay) {
			continue
		}
		h[k] = v
	}
	id := l.ID()
	h.Set(schema.HeaderReplay, id)
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	t := deniedTracker(r.js.Conn())
	mark := t.mark()
	ack, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: l.JobSubject, Header: h, Data: l.Data},
		natsjs.WithExpectStream(r.stream), natsjs.WithMsgID("replay:"+id))
	if err != nil {
		// A denied stream publish is never answered: it times out, and the
		// violation says why.
		if t.deniedSince(ctx, mark, l.JobSubject, nil) {
			err = fmt.Errorf("%w: this user may not publish jobs", deniedError(l.JobSubject))
		}
		return nil, fmt.Errorf("replay of dead letter %d to %s: %w", l.Seq, l.JobSubject, err)
	}
	return ack, nil
}

// dlqPrefix is the subject prefix of the dead letters (ending in "."),
// from the DLQ stream's subjects.
func dlqPrefix(subjects []string) string {
	for _, s := range subjects {
		if strings.HasPrefix(s, "$") {
			continue // the advisories
		}
		base := strings.TrimSuffix(strings.TrimSuffix(s, ">"), "*")
		if !strings.HasSuffix(base, ".") {
			base += "."
		}
		return base
	}
	return strings.TrimSuffix(schema.SubjectDLQ, ">")
}
