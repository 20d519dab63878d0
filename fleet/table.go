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
	// Groups are the shapes' models and SMs, with the live members of each.
	Groups  []Group       `json:"groups"`
	Members []MemberEntry `json:"members"`
	Shapes  []ShapeEntry  `json:"shapes"`
	Wants   []KeyEntry    `json:"wants"`
	Locks   []KeyEntry    `json:"locks"`
	Probes  []ProbeEntry  `json:"probes"`
	// Unknown are keys of no known layout.
	Unknown []string `json:"unknown,omitempty"`
}

// ShapeEntry is one compiled shape. Gone says its builder has no live
// member key: the process is gone (or predates membership).
type ShapeEntry struct {
	Key ShapeKey `json:"key"`
	ShapeRecord
	Gone bool `json:"gone,omitempty"`
}

// KeyEntry is one want or lock: whose and since when. A live holder
// renews its lock, so a lock's age is how long its compile has run.
type KeyEntry struct {
	Key  ShapeKey  `json:"key"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Gone bool      `json:"gone,omitempty"`
}

// MemberEntry is one live member: its heartbeat.
type MemberEntry struct {
	Key string `json:"key"`
	MemberRecord
}

// Group is one model on one SM (key tokens): its shapes in the bucket, the
// longest of them, and the names of its live members.
type Group struct {
	Model   string   `json:"model"`
	SM      string   `json:"sm"`
	Shapes  int      `json:"shapes"`
	Ceiling int      `json:"ceiling"`
	Members []string `json:"members"`
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
	t.settle()
	return t, nil
}

// settle marks what names no live member and groups the shapes by model
// and SM, with each group's live members.
func (t *Table) settle() {
	live := map[string]bool{}
	for _, m := range t.Members {
		live[m.Name] = true
	}
	gone := func(by string) bool { return by != "" && !live[by] }
	type gk struct{ model, sm string }
	idx := map[gk]int{}
	group := func(model, sm string) *Group {
		k := gk{model, sm}
		i, ok := idx[k]
		if !ok {
			i = len(t.Groups)
			idx[k] = i
			t.Groups = append(t.Groups, Group{Model: model, SM: sm, Members: []string{}})
		}
		return &t.Groups[i]
	}
	for i := range t.Shapes {
		s := &t.Shapes[i]
		s.Gone = gone(s.By)
		g := group(s.Key.Model, s.Key.SM)
		g.Shapes++
		g.Ceiling = max(g.Ceiling, s.Key.Seq)
	}
	for _, keys := range [][]KeyEntry{t.Wants, t.Locks} {
		for i := range keys {
			keys[i].Gone = gone(keys[i].By)
		}
	}
	for _, m := range t.Members {
		g := group(KeyToken(m.Model), m.SM)
		g.Members = append(g.Members, m.Name)
	}
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
	case KindMember:
		if rec, err := DecodeMemberRecord(e.Value); err == nil {
			t.Members = append(t.Members, MemberEntry{Key: e.Key, MemberRecord: rec})
		} else {
			t.Unknown = append(t.Unknown, e.Key)
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
	slices.SortFunc(t.Members, func(a, b MemberEntry) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.SM, b.SM), strings.Compare(a.Name, b.Name))
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
	fmt.Fprintf(tw, "MEMBERS (%d live)\n", len(t.Members))
	fmt.Fprintln(tw, "NAME\tMODEL\tSM\tSHAPES\tCEILING\tUP\tSEEN")
	for _, m := range t.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Name, m.Model, m.SM, m.Shapes, m.Ceiling,
			strings.TrimSuffix(age(m.Started), " ago"), age(m.At))
	}
	fmt.Fprintf(tw, "\nSHAPES (%d)\n", len(t.Shapes))
	for _, g := range t.Groups {
		members := "no live member"
		if len(g.Members) > 0 {
			members = "members " + strings.Join(g.Members, ", ")
		}
		fmt.Fprintf(tw, "%s on %s: %d shapes, up to seq %d; %s\n", g.Model, g.SM, g.Shapes, g.Ceiling, members)
	}
	fmt.Fprintln(tw, "MODEL\tSM\tSHAPE\tBY\tVIA\tCOMPILE\tFILES\tAT")
	for _, s := range t.Shapes {
		compile := "-"
		if s.CompileMS > 0 {
			compile = (time.Duration(s.CompileMS) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\t%s\t%d\t%s\n", s.Key.Model, s.Key.SM, s.Key.Batch, s.Key.Seq,
			by(s.By, s.Gone), dash(s.Via), compile, len(s.Files), age(s.At))
	}
	for _, sec := range []struct {
		title string
		keys  []KeyEntry
	}{{"WANTS", t.Wants}, {"LOCKS", t.Locks}} {
		fmt.Fprintf(tw, "\n%s (%d)\n", sec.title, len(sec.keys))
		fmt.Fprintln(tw, "MODEL\tSM\tSHAPE\tBY\tSINCE")
		for _, k := range sec.keys {
			fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\n", k.Key.Model, k.Key.SM, k.Key.Batch, k.Key.Seq, by(k.By, k.Gone), age(k.At))
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

// by is a record's writer, marked when it is no live member.
func by(name string, gone bool) string {
	if gone {
		return name + " (gone)"
	}
	return dash(name)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
