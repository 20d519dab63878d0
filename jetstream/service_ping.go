package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ServiceMember is what one member of the embed service says about itself
// in its $SRV.INFO answer.
type ServiceMember struct {
	// ID is the micro service instance id.
	ID      string
	Version string
	// Model is the model it serves (the "model" metadata of [StartService]).
	Model string
}

// PingService asks the embed service who serves it: the first member to
// answer $SRV.INFO.embed, bounded by ctx (give it a deadline). When no
// member is subscribed the error wraps [ErrNoService].
func PingService(ctx context.Context, nc *nats.Conn) (ServiceMember, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, ServiceName, "")
	if err != nil {
		return ServiceMember{}, err
	}
	msg, err := nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return ServiceMember{}, fmt.Errorf("%w on %s: %w", ErrNoService, subject, err)
	}
	if err != nil {
		return ServiceMember{}, fmt.Errorf("ping %s: %w", subject, err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return ServiceMember{}, fmt.Errorf("ping %s: the answer does not decode: %w", subject, err)
	}
	return ServiceMember{ID: info.ID, Version: info.Version, Model: info.Metadata["model"]}, nil
}

// ServicePinger is [PingService] on nc, as a function value.
func ServicePinger(nc *nats.Conn) func(context.Context) (ServiceMember, error) {
	return func(ctx context.Context) (ServiceMember, error) { return PingService(ctx, nc) }
}
