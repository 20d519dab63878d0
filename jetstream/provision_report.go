package jetstream

import (
	"errors"
	"fmt"
	"strings"
)

// Action is what [Provision] did to one object.
type Action int

// The actions of a provisioning [ObjectOutcome].
const (
	// Created means the object did not exist and was created.
	Created Action = iota + 1
	// Unchanged means the object already had the wanted config.
	Unchanged
	// Updated means fields that JetStream can change in place were changed.
	Updated
	// Refused means a field differs that JetStream cannot change in place;
	// nothing of that object was changed.
	Refused
	// Failed means the server refused a create or an update.
	Failed
	// Missing means the object does not exist and [ModeCheck] created
	// nothing.
	Missing
	// Drifted means fields differ that [ModeCreate] or [ModeCheck] left
	// alone: only `jetembed provision` changes them.
	Drifted
)

func (a Action) String() string {
	switch a {
	case Created:
		return "created"
	case Unchanged:
		return "unchanged"
	case Updated:
		return "updated"
	case Refused:
		return "refused"
	case Failed:
		return "failed"
	case Missing:
		return "missing"
	case Drifted:
		return "drifted"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Change is one field that differs from the wanted config.
type Change struct {
	// Field is the Go field name in nats.go's config struct, e.g. MaxAge.
	Field string
	// Have and Want are the current and the wanted value, printed.
	Have, Want string
	// Downgrade marks a change that lowers replicas or removes subjects.
	Downgrade bool
}

func (c Change) String() string {
	return fmt.Sprintf("%s %s -> %s", c.Field, c.Have, c.Want)
}

// ObjectOutcome is what happened to one stream, consumer or bucket.
type ObjectOutcome struct {
	// Kind is "stream", "consumer", "kv" or "objstore".
	Kind string
	// Name is the object's name; a consumer's is "STREAM/consumer".
	Name string
	// Action is what was done.
	Action Action
	// Changes are the drifted fields for Updated and Refused.
	Changes []Change
	// Err is the server's error for Failed, or the drift error for Refused.
	Err error
}

// Fields returns the names of the changed fields.
func (o ObjectOutcome) Fields() []string {
	out := make([]string, len(o.Changes))
	for i, c := range o.Changes {
		out[i] = c.Field
	}
	return out
}

func (o ObjectOutcome) String() string { return o.format(false) }

func (o ObjectOutcome) format(dryRun bool) string {
	var b strings.Builder
	action := o.Action.String()
	if dryRun && (o.Action == Created || o.Action == Updated) {
		action = "would be " + action
	}
	fmt.Fprintf(&b, "%-8s %-24s %s", o.Kind, o.Name, action)
	for i, c := range o.Changes {
		if i == 0 {
			b.WriteString(" ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(c.String())
	}
	switch o.Action {
	case Refused:
		if errors.Is(o.Err, ErrDowngrade) {
			b.WriteString(" (a downgrade: give --allow-downgrade to apply it)")
		} else {
			b.WriteString(" (JetStream cannot change this in place; recreate the object or keep its config)")
		}
	case Drifted:
		b.WriteString(" (not applied: run `jetembed provision` to change it)")
	case Missing:
		b.WriteString(" (create it with `jetembed provision`)")
	case Failed:
		fmt.Fprintf(&b, ": %v", o.Err)
	}
	return b.String()
}

// ProvisionReport lists what [Provision] did, one [ObjectOutcome] per object.
type ProvisionReport struct {
	Outcomes []ObjectOutcome
	// DryRun says nothing was changed: Created and Updated are what would
	// have been done.
	DryRun bool
}

// String prints one line per object.
func (r ProvisionReport) String() string {
	var b strings.Builder
	for _, o := range r.Outcomes {
		b.WriteString(o.format(r.DryRun))
		b.WriteByte('\n')
	}
	return b.String()
}

// Changed reports whether anything was created or updated (or, in a dry
// run, would be).
func (r ProvisionReport) Changed() bool {
	for _, o := range r.Outcomes {
		if o.Action == Created || o.Action == Updated {
			return true
		}
	}
	return false
}

// Refused reports whether some object has drift that was not applied.
func (r ProvisionReport) Refused() bool {
	for _, o := range r.Outcomes {
		if o.Action == Refused {
			return true
		}
	}
	return false
}

// Find returns the outcome for the object of kind and name.
func (r ProvisionReport) Find(kind, name string) (ObjectOutcome, bool) {
	for _, o := range r.Outcomes {
		if o.Kind == kind && o.Name == name {
			return o, true
		}
	}
	return ObjectOutcome{}, false
}

// Drift returns the outcomes whose fields differ but were left alone
// ([Drifted]).
func (r ProvisionReport) Drift() []ObjectOutcome {
	var out []ObjectOutcome
	for _, o := range r.Outcomes {
		if o.Action == Drifted {
			out = append(out, o)
		}
	}
	return out
}
