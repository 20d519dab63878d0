package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"

	"github.com/jetembed/jetembed/jetstream"
)

func TestProbeCoefficientsShared(t *testing.T) {
	srv := newServer(t, nil)
	ctx := t.Context()
	const model, arch = "bge-m3@0123456789ab", "amd64-xeon-t8"

	if _, err := fleet.LoadProbe(ctx, store(t, srv.JS, srv), model, "cpu", arch); !errors.Is(err, fleet.ErrNoProbe) {
		t.Fatalf("LoadProbe on an empty bucket: %v, want ErrNoProbe", err)
	}
	if err := fleet.StoreProbe(ctx, store(t, srv.JS, srv), model, "cpu", arch, "host-a/1", 2e-9, 3e-12); err != nil {
		t.Fatal(err)
	}
	// A peer that probed at the same time does not replace the record.
	if err := fleet.StoreProbe(ctx, store(t, srv.JS, srv), model, "cpu", arch, "host-b/1", 5e-9, 7e-12); err != nil {
		t.Fatal(err)
	}
	got, err := fleet.LoadProbe(ctx, store(t, srv.JS, srv), model, "cpu", arch)
	if err != nil {
		t.Fatal(err)
	}
	if got.A != 2e-9 || got.Bq != 3e-12 || got.By != "host-a/1" {
		t.Errorf("LoadProbe = %+v, want the first record", got)
	}
	// Plans and timings are per SM and arch: other keys know nothing.
	for _, other := range [][2]string{{"8.9", arch}, {"cpu", "arm64-graviton-t8"}} {
		if _, err := fleet.LoadProbe(ctx, store(t, srv.JS, srv), model, other[0], other[1]); !errors.Is(err, fleet.ErrNoProbe) {
			t.Errorf("LoadProbe(%v): %v, want ErrNoProbe", other, err)
		}
	}
	if err := fleet.StoreProbe(ctx, store(t, srv.JS, srv), model, "cpu", arch, "x", 0, 0); err == nil {
		t.Error("StoreProbe accepted an empty cost model")
	}
}

func TestReadFleetTable(t *testing.T) {
	srv := newServer(t, nil)
	ctx := t.Context()
	kv := bucket(t, srv)
	put := func(key, value string) {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	k := fleet.ShapeKey{Model: fleet.KeyToken("bge-m3@0123456789ab"), SM: "sm89", Batch: 1, Seq: 8192}
	put(k.String(), `{"by":"gpu-1/7","at":"2026-11-29T11:00:00Z","via":"lock","compile_ms":183000,"files":["a.engine","a.profile"]}`)
	put(fleet.ShapeKey{Model: k.Model, SM: "sm89", Batch: 2, Seq: 512}.String(), `{"by":"gpu-2/9","via":"run"}`)
	put(fleet.ShapeKey{Model: k.Model, SM: "sm89", Batch: 1, Seq: 16384}.Want(), `{"by":"gpu-3/1","at":"2026-11-29T11:59:00Z"}`)
	put(fleet.ShapeKey{Model: k.Model, SM: "sm89", Batch: 4, Seq: 4096}.Lock(), `{"by":"gpu-1/7","at":"2026-11-29T11:58:00Z"}`)
	put(fleet.ProbeKey("bge-m3@0123456789ab", "8.9", "H100"), `{"a":1.5e-9,"bq":2e-13,"by":"gpu-1/7"}`)
	put("something.else", `x`)
	// gpu-1/7 is live; gpu-2/9 and gpu-3/1 are gone.
	put(fleet.MemberKey("gpu-1/7"), `{"name":"gpu-1/7","model":"bge-m3@0123456789ab","sm":"sm89","shapes":12,"ceiling":8192,"started":"2026-11-29T10:00:00Z","at":"2026-11-29T11:59:50Z"}`)
	put(fleet.MemberKey("junk/1"), `{"name":""}`)
	put(fleet.ShapeKey{Model: k.Model, SM: "sm89", Batch: 8, Seq: 64}.String(), `{}`)
	if err := kv.Delete(ctx, fleet.ShapeKey{Model: k.Model, SM: "sm89", Batch: 8, Seq: 64}.String()); err != nil {
		t.Fatal(err)
	}

	tab, err := fleet.Read(ctx, store(t, srv.JS, srv))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Shapes) != 2 || len(tab.Wants) != 1 || len(tab.Locks) != 1 || len(tab.Probes) != 1 || len(tab.Unknown) != 2 || len(tab.Members) != 1 {
		t.Fatalf("table %+v: want 2 shapes (the deleted one gone), 1 want, 1 lock, 1 probe, 1 member, 2 unknown keys", tab)
	}
	if !tab.Shapes[0].Gone || tab.Shapes[1].Gone || !tab.Wants[0].Gone || tab.Locks[0].Gone {
		t.Errorf("gone marks: shapes %+v, wants %+v, locks %+v; want only gpu-1/7's records live", tab.Shapes, tab.Wants, tab.Locks)
	}
	if g := tab.Groups; len(g) != 1 || g[0].Shapes != 2 || g[0].Ceiling != 8192 || len(g[0].Members) != 1 || g[0].Members[0] != "gpu-1/7" {
		t.Errorf("groups %+v: want one model and SM, 2 shapes up to 8192, member gpu-1/7", g)
	}
	if s := tab.Shapes[0]; s.Key.Seq != 512 || s.By != "gpu-2/9" || tab.Shapes[1].CompileMS != 183000 || len(tab.Shapes[1].Files) != 2 {
		t.Errorf("shapes %+v: want sorted by seq with their records", tab.Shapes)
	}
	if p := tab.Probes[0]; p.SM != "sm89" || p.Arch != "H100" || p.A != 1.5e-9 {
		t.Errorf("probe %+v", p)
	}

	var out bytes.Buffer
	if err := tab.Write(&out, at); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"MEMBERS (1 live)", "SHAPES (2)", "WANTS (1)", "LOCKS (1)", "PROBES (1)", "OTHER KEYS (2)",
		"gpu-1/7  bge-m3@0123456789ab  sm89  12      8192     2h0m0s  10s ago",
		"bge-m3_0123456789ab on sm89: 2 shapes, up to seq 8192; members gpu-1/7",
		"bge-m3_0123456789ab  sm89  1x8192  gpu-1/7         lock  3m3s     2      1h0m0s ago",
		"2x512   gpu-2/9 (gone)", "1x16384  gpu-3/1 (gone)", "1m0s ago", "4x4096", "2m0s ago", "something.else",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table output lacks %q:\n%s", want, text)
		}
	}
	if _, err := jetstream.OpenKVStore(context.Background(), srv.JS, "NO_SUCH_BUCKET"); err == nil {
		t.Error("opening a missing bucket: no error")
	}
}
