package main

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// TestTenantResultsConsumersCapped: a tenant may hold at most
// schema.DefaultResultsConsumers results consumers at once, under its own
// names, in both shipped layouts: producer-a's readers past the cap fail
// with ErrResultsConsumers (and create nothing), producer-b still reads
// while producer-a holds all of its names, and a reader that stops frees
// its name at once (it deletes its consumer).
func TestTenantResultsConsumersCapped(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { resultsConsumersCapped(t, l.conf) })
	}
}

func resultsConsumersCapped(t *testing.T, conf string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, caFile := runTenancyServerConf(t, conf)
	t.Setenv("JETEMBED_NATS_PASSWORD", opsPassword("provisioner"))
	if code, out, errOut := runCmd(t, ctx, "provision", "--nats", url, "--nats-user", "provisioner", "--nats-tls-ca", caFile); code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	// One stored result each (not the fleet's: the reader yields it as
	// foreign, which is all a reader needs to be open).
	emb, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo("embedder", opsPassword("embedder")))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ejs, _ := natsjs.New(emb)
	for _, tenant := range []string{"producer-a", "producer-b"} {
		if _, err := ejs.Publish(ctx, "embed.results."+tenant+".run.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	prov, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	pjs, _ := natsjs.New(prov)
	consumers := func() []string {
		t.Helper()
		st, err := pjs.Stream(ctx, schema.StreamResults)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		lister := st.ConsumerNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		return names
	}
	// open starts a reader of tenant's run and returns the function that
	// stops it and its first yield's error.
	open := func(tenant string) (func(), error) {
		t.Helper()
		c, err := client.New(connectProducer(t, url, caFile, tenant).Conn, client.WithTenant(tenant), client.WithRun("run"))
		if err != nil {
			t.Fatal(err)
		}
		next, stop := iter.Pull2(c.Results(ctx, "run"))
		_, err, ok := next()
		if !ok {
			t.Fatalf("%s: the reader ended at once", tenant)
		}
		return stop, err
	}
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for k := range schema.DefaultResultsConsumers {
		stop, err := open("producer-a")
		stops = append(stops, stop)
		if !errors.Is(err, client.ErrForeignResult) {
			t.Fatalf("producer-a's reader %d: %v, want the stored message", k, err)
		}
	}
	start := time.Now()
	stop, err := open("producer-a")
	stop()
	if !errors.Is(err, client.ErrResultsConsumers) {
		t.Fatalf("producer-a's reader past its cap: %v, want ErrResultsConsumers", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if n := len(consumers()); n != schema.DefaultResultsConsumers {
		t.Errorf("%d results consumers, want %d (producer-a's)", n, schema.DefaultResultsConsumers)
	}
	// producer-b is not held back by producer-a's cap.
	stopB, err := open("producer-b")
	stops = append(stops, stopB)
	if !errors.Is(err, client.ErrForeignResult) {
		t.Fatalf("producer-b's reader while producer-a is at its cap: %v", err)
	}
	// A reader that stops frees its name: the next one gets it.
	stops[0]()
	stops[0] = func() {}
	stop, err = open("producer-a")
	stops = append(stops, stop)
	if !errors.Is(err, client.ErrForeignResult) {
		t.Fatalf("producer-a's reader after one stopped: %v", err)
	}
	want := map[string]bool{}
	for k := range schema.DefaultResultsConsumers {
		want[schema.ResultsConsumerName("producer-a", k)] = true
	}
	for _, n := range consumers() {
		if !want[n] && n != schema.ResultsConsumerName("producer-b", 0) {
			t.Errorf("results consumer %q is no tenant's name", n)
		}
	}
}
