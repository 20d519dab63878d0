package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Table is the content of the engines bucket, for operators.
type Table struct {
	Shapes []ShapeEntry `json:"shapes"`
	Wants  []KeyEntry   `json:"wants"`
	Locks  []KeyEntry   `json:"locks"`
	Probes []ProbeEntry `json:"probes"`
	// Unknown are keys of no known layout.
	Unknown []string `json:"unknown,omitempty"`
}

// ShapeEntry is one compiled shape.
type ShapeEntry struct {
	Key ShapeKey `json:"key"`
	ShapeRecord
}

// KeyEntry is one want or lock: whose and since when. A live holder
// renews its lock, so a lock's age is how long its compile has run.
type KeyEntry struct {
	Key ShapeKey  `json:"key"`
	By  string    `json:"by"`
	At  time.Time `json:"at"`
}

// ProbeEntry is one set of probe coefficients.
type ProbeEntry struct {
	Model string `json:"model"`
	SM    string `json:"sm"`
	Arch  string `json:"arch"`
	ProbeRecord
}

// Read reads every live key of the engines bucket.
func Read(ctx context.Context, kv Store) (Table, error) {
	var t Table
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch
	w, err := kv.Watch(ctx)
	if err != nil {
		return t, fmt.Errorf("fleet: read: %w", err)
	}
	for {
		var e *Entry
		var ok bool
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case e, ok = <-w:
		}
		if !ok {
			return t, errors.New("fleet: read: the watch ended before the current values")
		}
		if e == nil {
			break
		}
		if e.Op == OpPut {
			t.add(e)
		}
	}
	t.sort()
	return t, nil
}

func (t *Table) add(e *Entry) {
	pk := ParseKey(e.Key)
	switch pk.Kind {
	case KindShape:
		rec, _ := DecodeShapeRecord(e.Value) // a foreign value still shows its key
		t.Shapes = append(t.Shapes, ShapeEntry{Key: pk.Shape, ShapeRecord: rec})
	case KindWant, KindLock:
		rec, _ := DecodeLockRecord(e.Value) // WantRecord has the same fields
		k := KeyEntry{Key: pk.Shape, By: rec.By, At: rec.At}
		if pk.Kind == KindWant {
			t.Wants = append(t.Wants, k)
		} else {
			t.Locks = append(t.Locks, k)
		}
	case KindProbe:
		rec, _ := DecodeProbeRecord(e.Value)
		t.Probes = append(t.Probes, ProbeEntry{Model: pk.Shape.Model, SM: pk.Shape.SM, Arch: pk.Arch, ProbeRecord: rec})
	default:
		t.Unknown = append(t.Unknown, e.Key)
	}
}

func (t *Table) sort() {
	byShape := func(a, b ShapeKey) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.SM, b.SM),
			cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Batch, b.Batch))
	}
	slices.SortFunc(t.Shapes, func(a, b ShapeEntry) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Wants, func(a, b KeyEntry) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Locks, func(a, b KeyEntry) int { return byShape(a.Key, b.Key) })
	slices.SortFunc(t.Probes, func(a, b ProbeEntry) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.SM, b.SM), strings.Compare(a.Arch, b.Arch))
	})
	slices.Sort(t.Unknown)
}

// Write prints the table: shapes grouped by model and SM with who built
// them, then pending wants, held locks and probe coefficients. Ages are
// relative to now.
func (t Table) Write(w io.Writer, now time.Time) error {
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
		keys  []KeyEntry
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
