package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
)

func TestFleetCommand(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Before provisioning there is no bucket to show.
	if code, _, errOut := runCmd(t, ctx, "fleet", "--nats", s.ClientURL()); code != 1 || !strings.Contains(errOut, "EMBED_ENGINES") {
		t.Errorf("fleet without a bucket: exit %d, %q; want 1 naming the bucket", code, errOut)
	}
	if code, _, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL()); code != 0 {
		t.Fatalf("provision: exit %d: %s", code, errOut)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	kv, err := js.KeyValue(ctx, "EMBED_ENGINES")
	if err != nil {
		t.Fatal(err)
	}
	k := fleet.ShapeKey{Model: fleet.KeyToken("bge-m3@0123456789ab"), SM: fleet.SMToken("8.9"), Batch: 2, Seq: 8192}
	for key, v := range map[string]string{
		k.String(): `{"by":"gpu-7/42","via":"lock","compile_ms":95000}`,
		fleet.ShapeKey{Model: k.Model, SM: k.SM, Batch: 1, Seq: 16384}.Want(): `{"by":"gpu-3/9"}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := runCmd(t, ctx, "fleet", "--nats", s.ClientURL())
	if code != 0 {
		t.Fatalf("fleet: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"SHAPES (1)", "bge-m3_0123456789ab", "sm89", "2x8192", "gpu-7/42", "1m35s", "WANTS (1)", "1x16384", "gpu-3/9", "LOCKS (0)", "PROBES (0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = runCmd(t, ctx, "fleet", "--nats", s.ClientURL(), "--json")
	var tab fleet.Table
	if err := json.Unmarshal([]byte(out), &tab); code != 0 || err != nil {
		t.Fatalf("fleet --json: exit %d, %v: %s%s", code, err, errOut, out)
	}
	if len(tab.Shapes) != 1 || tab.Shapes[0].Key != k || tab.Shapes[0].CompileMS != 95000 || len(tab.Wants) != 1 || tab.Wants[0].By != "gpu-3/9" {
		t.Errorf("fleet --json = %+v", tab)
	}
	if code, _, _ := runCmd(t, ctx, "fleet", "--nats", s.ClientURL(), "extra"); code != 2 {
		t.Errorf("fleet with an argument: exit %d, want 2", code)
	}
}
