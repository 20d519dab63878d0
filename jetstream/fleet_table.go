package jetstream

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// FleetTable is the content of the engines bucket, for operators.
type FleetTable struct {
	Shapes []FleetShape `json:"shapes"`
	Wants  []FleetKey   `json:"wants"`
	Locks  []FleetKey   `json:"locks"`
	Probes []FleetProbe `json:"probes"`
	// Unknown are keys of no known layout.
	Unknown []string `json:"unknown,omitempty"`
}

// FleetShape is one compiled shape.
type FleetShape struct {
	Key ShapeKey `json:"key"`
	ShapeRecord
}

// FleetKey is one want or lock: whose and since when. A live holder
// renews its lock, so a lock's age is how long its compile has run.
type FleetKey struct {
	Key ShapeKey  `json:"key"`
	By  string    `json:"by"`
	At  time.Time `json:"at"`
}

// FleetProbe is one set of probe coefficients.
type FleetProbe struct {
	Model string `json:"model"`
	SM    string `json:"sm"`
	Arch  string `json:"arch"`
	ProbeRecord
}

// ReadFleet reads every key of the engines bucket (default EMBED_ENGINES).
func ReadFleet(ctx context.Context, js natsjs.JetStream, bucket string) (FleetTable, error) {
	var t FleetTable
	kv, err := js.KeyValue(ctx, bucketOrDefault(bucket))
	if err != nil {
		return t, fmt.Errorf("fleet: bucket %s: %w", bucketOrDefault(bucket), err)
	}
	w, err := kv.WatchAll(ctx, natsjs.IgnoreDeletes())
	if err != nil {
		return t, fmt.Errorf("fleet: read %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		var e natsjs.KeyValueEntry
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			break
		}
		t.add(e)
	}
	t.sort()
	return t, nil
}

func (t *FleetTable) add(e natsjs.KeyValueEntry) {
	pk := ParseKey(e.Key())
	switch pk.Kind {
	case KindShape:
		rec, _ := DecodeShapeRecord(e.Value()) // a foreign value still shows its key
		t.Shapes = append(t.Shapes, FleetShape{Key: pk.Shape, ShapeRecord: rec})
	case KindWant, KindLock:
		rec, _ := DecodeLockRecord(e.Value()) // WantRecord has the same fields
		k := FleetKey{Key: pk.Shape, By: rec.By, At: rec.At}
		if pk.Kind == KindWant {
			t.Wants = append(t.Wants, k)
		} else {
			t.Locks = append(t.Locks, k)
		}
	case KindProbe:
		rec, _ := DecodeProbeRecord(e.Value())
		t.Probes = append(t.Probes, FleetProbe{Model: pk.Shape.Model, SM: pk.Shape.SM, Arch: pk.Arch, ProbeRecord: rec})
	default:
		t.Unknown = append(t.Unknown, e.Key())
	}
}

func (t *FleetTable) sort() {
	byShape := func(a, b ShapeKey) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.SM, b.SM),
			cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Batch, b.Batch))
	}
	slices.SortFunc(t.Shapes, func(a, b FleetShape) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Wants, func(a, b FleetKey) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Locks, func(a, b FleetKey) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Probes, func(a, b FleetProbe) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.SM, b.SM), strings.Compare(a.Arch, b.Arch))
	})
	slices.Sort(t.Unknown)
}

// Write prints the table: shapes grouped by model and SM with who built
// them, then pending wants, held locks and probe coefficients. Ages are
// relative to now.
func (t FleetTable) Write(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	age := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return now.Sub(at).Round(time.Second).String() + " ago"
	}
	fmt.Fprintf(tw, "SHAPES (%d)\n", len(t.Shapes))
	fmt.Fprintln(tw, "MODEL\tSM\tSHAPE\tBY\tVIA\tCOMPILE\tFILES\tAT")
	for _, s := range t.Shapes {
		compile := "-"
		if s.CompileMS > 0 {
			compile = (time.Duration(s.CompileMS) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\t%s\t%d\t%s\n", s.Key.Model, s.Key.SM, s.Key.Batch, s.Key.Seq,
			dash(s.By), dash(s.Via), compile, len(s.Files), age(s.At))
	}
	for _, sec := range []struct {
		title string
		keys  []FleetKey
	}{{"WANTS", t.Wants}, {"LOCKS", t.Locks}} {
		fmt.Fprintf(tw, "\n%s (%d)\n", sec.title, len(sec.keys))
		fmt.Fprintln(tw, "MODEL\tSM\tSHAPE\tBY\tSINCE")
		for _, k := range sec.keys {
			fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\n", k.Key.Model, k.Key.SM, k.Key.Batch, k.Key.Seq, dash(k.By), age(k.At))
		}
	}
	fmt.Fprintf(tw, "\nPROBES (%d)\n", len(t.Probes))
	fmt.Fprintln(tw, "MODEL\tSM\tARCH\tA\tBQ\tBY\tAT")
	for _, p := range t.Probes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%.4g\t%s\t%s\n", p.Model, p.SM, p.Arch, p.A, p.Bq, dash(p.By), age(p.At))
	}
	if len(t.Unknown) > 0 {
		fmt.Fprintf(tw, "\nOTHER KEYS (%d)\n", len(t.Unknown))
		for _, k := range t.Unknown {
			fmt.Fprintln(tw, k)
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
