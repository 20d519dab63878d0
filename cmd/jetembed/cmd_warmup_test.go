package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestWarmupPublishesToTheFleet is the init-container mode: `warmup
// --nats` records every shape it warmed, and its probe coefficients, in the
// engines bucket as serve does; a serve that joins later takes the probe
// and finds the shapes published.
func TestWarmupPublishesToTheFleet(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, _, errOut := runCmd(t, ctx, "provision", "--nats", srv.ClientURL()); code != 0 {
		t.Fatalf("provision: %s", errOut)
	}
	dir := tinyModel(t, "tiny-hidden")
	code, out, errOut := runCmd(t, ctx, "warmup", "--model", dir, "--nats", srv.ClientURL(),
		"--warmup-batches", "1,2", "--warmup-seqs", "8,64", "--probe=true", "--threads", "1")
	if code != 0 {
		t.Fatalf("warmup: exit %d: %s", code, errOut)
	}
	// The grid's shapes and the probe's (it ran them too).
	warmed := strings.Fields(out[strings.Index(out, "shapes: ")+len("shapes: "):])[0:]
	warmed = warmed[:slices.IndexFunc(warmed, func(s string) bool { return !strings.Contains(s, "x") })]
	if !strings.Contains(out, fmt.Sprintf("engines bucket EMBED_ENGINES: %d new shape records (%d shapes warmed)", len(warmed), len(warmed))) {
		t.Errorf("warmup output:\n%s", out)
	}
	code, out, errOut = runCmd(t, ctx, "fleet", "--nats", srv.ClientURL(), "--json")
	var tab fleet.Table
	if err := json.Unmarshal([]byte(out), &tab); code != 0 || err != nil {
		t.Fatalf("fleet --json: exit %d, %v: %s%s", code, err, errOut, out)
	}
	var got []string
	for _, s := range tab.Shapes {
		if s.Key.SM != "cpu" || s.Via != fleet.ViaRun || s.By == "" {
			t.Errorf("shape record %+v: want sm cpu, via run, by the warmup process", s)
		}
		got = append(got, fmt.Sprintf("%dx%d", s.Key.Batch, s.Key.Seq))
	}
	slices.Sort(got)
	slices.Sort(warmed)
	if !slices.Equal(got, warmed) || !slices.Contains(got, "2x64") {
		t.Errorf("shapes in the bucket: %v; want those warmed: %v", got, warmed)
	}
	if len(tab.Probes) != 1 || tab.Probes[0].A <= 0 && tab.Probes[0].Bq <= 0 {
		t.Errorf("probes %+v: want the warmup's coefficients", tab.Probes)
	}
	// A second init container (or a restart) adds nothing, and takes the
	// stored probe instead of probing again.
	code, out, errOut = runCmd(t, ctx, "warmup", "--model", dir, "--nats", srv.ClientURL(),
		"--warmup-batches", "1,2", "--warmup-seqs", "8,64", "--probe=true", "--threads", "1")
	if code != 0 || !strings.Contains(out, ": 0 new shape records") || !strings.Contains(errOut, "cost model from a peer's probe") {
		t.Errorf("second warmup: exit %d\n%s\n%s", code, out, errOut)
	}
	// Without --nats, warmup needs no server.
	if code, _, errOut := runCmd(t, ctx, "warmup", "--model", dir, "--warmup-seqs", "8", "--probe=false", "--threads", "1"); code != 0 {
		t.Errorf("warmup without --nats: exit %d: %s", code, errOut)
	}
}
