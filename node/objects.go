package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/jetstream"
)

// checkObjects makes sure the server's objects exist (CheckObjects), or
// creates the missing ones (CreateMissing); drift is a warning per object
// naming each field, never applied. lastErr is the connection's last
// error: a request the user may not make only times out, and the server's
// reason comes separately.
func checkObjects(ctx context.Context, log *slog.Logger, js natsjs.JetStream, cfg jetstream.Config, check Check, lastErr func() error) error {
	mode := jetstream.ModeCheck
	switch check {
	case SkipCheck:
		return nil
	case CreateMissing:
		mode = jetstream.ModeCreate
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r, err := jetstream.Provision(ctx, js, cfg, jetstream.WithMode(mode), jetstream.ServerTuning())
	for _, o := range r.Outcomes {
		switch o.Action {
		case jetstream.Created:
			log.Info("created", "object", o.Kind, "name", o.Name)
		case jetstream.Drifted, jetstream.Refused:
			log.Warn("server config differs from the flags; not applied (run `jetembed provision` to change it)",
				"object", o.Kind, "name", o.Name, "fields", o.Fields(), "changes", fmt.Sprint(o.Changes))
		case jetstream.Missing:
			log.Error("missing", "object", o.Kind, "name", o.Name)
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrMissing):
		return fmt.Errorf("%w: %w: create them with `jetembed provision` (as a user allowed to), or start with --provision=create", ErrObjects, err)
	case errors.Is(err, jetstream.ErrDrift):
		return nil // warned above: the node runs with what the server has
	case err != nil && lastErr() != nil:
		return fmt.Errorf("%w: checking the server's objects: %w (the server said: %v)", ErrObjects, err, lastErr())
	case err != nil:
		return fmt.Errorf("%w: checking the server's objects: %w", ErrObjects, err)
	}
	return nil
}

// objectsToCheck are the objects the node needs: the cache bucket only
// when it uses the cache, so that a deployment provisioned before the
// cache existed still starts with --cache off.
func (c Config) objectsToCheck() jetstream.Config {
	o := c.Objects
	if !c.Cache {
		o.Cache.Name = ""
	}
	return o
}
