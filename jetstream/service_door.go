package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// service is the running embed service: micro's, with the door every
// request passes ([service.door]) and the workers that serve the queues
// behind it. Stop unregisters it, answers what still waits, and stops
// the workers.
type service struct {
	micro.Service
	nc       *nats.Conn
	sink     Sink
	log      *slog.Logger
	replies  schema.ReplyPolicy
	metrics  ServiceMetrics
	ctx      context.Context
	in       *inbound
	slow     *slowSubs
	subjects map[string]bool // every endpoint's subscription subject

	workers   sync.WaitGroup
	stopSlow  context.CancelFunc
	stopAfter func() bool
	once      sync.Once

	refusedLog, shedLog, failedLog rateLog
}

// endpoint is one endpoint of the service: how its requests are handled
// by a worker, and how an error answer is written without decoding them.
type endpoint struct {
	name, subject, format string
	// tenanted: the subject is <subject>.<tenant>.
	tenanted bool
	// everyMember: no queue group (every member answers).
	everyMember bool
	handle      func(ctx context.Context, it queued)
	// errBody is the body of an error answer in enc; nil for none (a
	// micro error without a body).
	errBody func(enc schema.Encoding, se *schema.Error) []byte
}

// serviceWorkers is how many requests are handled at once: handling is
// decoding and queueing (tokenize: tokenizing), never waiting for room.
func serviceWorkers() int { return min(max(runtime.GOMAXPROCS(0), 2), 8) }

// owns reports whether subject is one of the service's subscriptions.
func (s *service) owns(subject string) bool { return s.subjects[subject] }

// tenant is the tenant a request on ep names, as the job loop reads it:
// "" on a bare endpoint or with tenancy off.
func (s *service) tenant(ep *endpoint, subject string) string {
	if !ep.tenanted || s.replies.Tenancy.Off {
		return ""
	}
	return tenantOf(ep.subject, true)(subject)
}

// answerable reports whether a request of tenant may be answered on reply:
// the reply policy the job loop applies to every answer.
func (s *service) answerable(tenant, reply string) bool {
	if tenant != "" && !schema.ValidTenant(tenant) {
		return false
	}
	return s.replies.Check(tenant, reply) == nil
}

// door is the handler nats.go runs on an endpoint's subscription: it
// only checks the request and queues it (see service_inbound.go). A
// request whose reply may not be answered is queued too, marked, so that
// the job loop dead-letters it bad_reply; one that finds its tenant's
// queue full is answered overloaded at once, without a flush (nats.go's
// flusher sends a burst of such answers together), or, when it may not
// be answered either, only counted.
func (s *service) door(ep *endpoint) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		reply := req.Reply()
		if reply == "" {
			s.metrics.RequestsDropped(s.ctx, DropNoReply, 1)
			return
		}
		it := queued{req: req, ep: ep, tenant: s.tenant(ep, req.Subject()), received: time.Now(),
			size: int64(len(req.Data())+len(req.Subject())+len(reply)) + requestOverhead}
		it.refused = !s.answerable(it.tenant, reply)
		err := s.in.put(it)
		switch {
		case err == nil:
			return
		case it.refused:
			s.metrics.RequestsDropped(s.ctx, DropRefusedReply, 1)
			s.refusedLog.warn(s.log, "request dropped unanswered: its reply is outside the requester's space and its queue is full",
				"subject", req.Subject())
			return
		}
		reason, se := ShedQueueFull, schema.Errorf(schema.CodeOverloaded, "too many requests of this tenant waiting: retry later")
		if errors.Is(err, errStopping) {
			reason, se = ShedStopping, schema.Errorf(schema.CodeEngineUnavailable, "the service is stopping")
		}
		s.metrics.RequestsShed(s.ctx, reason, 1)
		s.shedLog.warn(s.log, "request refused at the door", "subject", req.Subject(), "code", se.Code)
		s.answerErr(it, se)
	})
}

// answerErr answers it with se, without decoding it and without a flush.
func (s *service) answerErr(it queued, se *schema.Error) {
	enc := schema.EncodingFor(it.req.Headers().Get(schema.HeaderContentType))
	var body []byte
	if it.ep.errBody != nil {
		body = it.ep.errBody(enc, se)
	}
	h := plainHeader(enc, "", se)
	if err := it.req.Error(string(se.Code), string(se.Code), body, micro.WithHeaders(micro.Headers(h))); err != nil {
		s.answerFailed(it.req, err)
	}
}

// answerFailed counts and logs an answer that could not be sent.
func (s *service) answerFailed(req micro.Request, err error) {
	s.metrics.RequestsDropped(s.ctx, DropAnswerFailed, 1)
	s.failedLog.warn(s.log, "answer not sent", "subject", req.Subject(), "err", err)
}

// work handles queued requests until the queues close.
func (s *service) work() {
	for {
		it, ok := s.in.take()
		if !ok {
			return
		}
		s.handle(it)
	}
}

// handle runs one request's endpoint; a panic is logged and the request
// answered internal (if its reply may be answered), never a crash.
func (s *service) handle(it queued) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handling a request panicked", "subject", it.req.Subject(), "panic", fmt.Sprint(p))
			if !it.refused {
				s.answerErr(it, schema.Errorf(schema.CodeInternal, "internal error"))
			}
		}
	}()
	if it.refused {
		s.refuseReply(it)
		return
	}
	it.ep.handle(s.ctx, it)
}

// refuseReply hands a request whose reply may not be answered to the job
// loop, which dead-letters it bad_reply (its tenant and reply checks come
// first) and counts it; nothing answers it.
func (s *service) refuseReply(it queued) {
	d := requestDelivery(s.nc, it.req, it.tenant, it.received)
	d.Refusal = schema.Errorf(schema.CodeBadReply, "the reply is outside the requester's space")
	if err := s.sink.Submit(s.ctx, d); err != nil {
		s.log.Debug("request refused", "subject", it.req.Subject(), "err", err)
	}
}

// embed hands a request of the embed endpoint to the job loop.
func (s *service) embed(ctx context.Context, it queued) {
	if err := s.sink.Submit(ctx, requestDelivery(s.nc, it.req, it.tenant, it.received)); err != nil {
		s.log.Debug("request refused", "subject", it.req.Subject(), "err", err)
	}
}

// Stop unregisters the service, answers the requests still waiting
// (engine_unavailable) and waits for the workers.
func (s *service) Stop() error {
	err := s.Service.Stop()
	s.stopAfter()
	s.shutdown()
	return err
}

func (s *service) shutdown() {
	s.once.Do(func() {
		for _, it := range s.in.close() {
			if it.refused {
				s.metrics.RequestsDropped(s.ctx, DropRefusedReply, 1)
				continue
			}
			s.metrics.RequestsShed(s.ctx, ShedStopping, 1)
			s.answerErr(it, schema.Errorf(schema.CodeEngineUnavailable, "the service is stopping"))
		}
		// Workers only decode and queue; one that does not return (a
		// sink that blocks) must not hold the stop forever.
		done := make(chan struct{})
		go func() { s.workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopWait):
			s.log.Warn("service stop: request workers still busy", "waited", stopWait)
		}
		s.stopSlow()
	})
}

// stopWait bounds how long Stop waits for the request workers.
const stopWait = 10 * time.Second

// resultErrBody is an embed endpoint's error answer: a result with no id.
func resultErrBody(enc schema.Encoding, se *schema.Error) []byte {
	b, _ := schema.EncodeResult(schema.ErrorResult("", se), enc)
	return b
}

func rerankErrBody(enc schema.Encoding, se *schema.Error) []byte {
	b, _ := schema.EncodeRerankResult(&schema.RerankResult{V: schema.Version, Error: se}, enc)
	return b
}

func tokenizeErrBody(enc schema.Encoding, se *schema.Error) []byte {
	b, _ := schema.EncodeTokenizeResult(&schema.TokenizeResult{V: schema.Version, Error: se}, enc)
	return b
}
