package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	jfleet "github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
)

// member is one consumer process of the fleet: its own connection, the
// worker (job loop, pull loop, publisher, request service), its fleet
// membership and its engine on one fake GPU.
type member struct {
	idx     int
	name    string
	nc      *nats.Conn
	w       *jetstream.Worker
	fl      *jfleet.Member
	eng     *engine.Engine
	started time.Time
	ready   time.Time // StartWorker returned: fetching
}

// memberEnv is what every member shares.
type memberEnv struct {
	urls   string
	cfg    jetstream.Config
	mf     modelFiles
	cost   gpuCost
	plans  *planCache
	ledger *ledger
	log    *slog.Logger
	// prefetch caps each member's pull loop (0: the worker's default).
	prefetch int
	// inFlight is the job loop's bulk budget (0: the default).
	inFlight int
}

func startMember(ctx context.Context, env *memberEnv, idx int) (*member, error) {
	m := &member{idx: idx, name: fmt.Sprintf("m%03d", idx), started: time.Now()}
	var err error
	m.nc, err = nats.Connect(env.urls, nats.Name("fleet-"+m.name), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("member %s: connect: %w", m.name, err)
	}
	fail := func(err error) (*member, error) {
		m.close()
		return nil, fmt.Errorf("member %s: %w", m.name, err)
	}
	if m.eng, err = openGPU(ctx, env.mf, m.name, env.cost, env.plans); err != nil {
		return fail(err)
	}
	js, err := jetstream.New(m.nc)
	if err != nil {
		return fail(err)
	}
	kv, err := jetstream.OpenKVStore(ctx, js, env.cfg.Engines.Name)
	if err != nil {
		return fail(err)
	}
	m.fl, err = jfleet.Join(ctx, kv, m.eng, jfleet.Config{
		Model: env.mf.m.ID, SM: "8.9", Member: m.name,
		MinSeq: env.cost.PlanSeq, IdleQuiet: time.Hour, Logger: env.log,
	})
	if err != nil {
		return fail(err)
	}
	m.w, err = jetstream.StartWorker(ctx, m.nc, jetstream.WorkerConfig{
		Config:      env.cfg,
		Consumer:    consumer.Config{Logger: env.log, InFlightTokens: env.inFlight},
		Embedder:    jfleet.Wrap(m.eng, m.fl),
		Sink:        func(c *consumer.Loop) jetstream.Sink { return tracedSink{c: c, l: env.ledger, member: idx} },
		PrefetchMax: env.prefetch,
		Grace:       10 * time.Second,
		Logger:      env.log,
	})
	if err != nil {
		return fail(err)
	}
	m.ready = time.Now()
	return m, nil
}

// kill is SIGKILL as the server sees it: the connection closes with
// nothing drained, acked or NAKed. What the member held comes back to the
// fleet after AckWait.
func (m *member) kill() {
	m.nc.Close()
	<-m.w.Done()
	_ = m.fl.Stop(context.Background())
	m.eng.Close()
}

// stop is SIGTERM: stop fetching, NAK the buffer, finish in-flight jobs,
// leave the fleet, drain the connection.
func (m *member) stop(ctx context.Context) error {
	err := m.w.Stop(ctx)
	_ = m.fl.Stop(context.Background())
	m.close()
	return err
}

func (m *member) close() {
	if m.fl != nil {
		_ = m.fl.Stop(context.Background())
	}
	if m.nc != nil {
		m.nc.Close()
	}
	if m.eng != nil {
		m.eng.Close()
	}
}
