package consumer

import (
	"fmt"
	"time"
)

// DeliveryLimits are the settings of the JetStream consumer that the
// loop's timing derives from. They belong to the server: the worker
// reads them from the durable consumer's info at start and sets them again
// when they change, so heartbeats come within the server's AckWait and the
// final delivery is the server's last.
type DeliveryLimits struct {
	// AckWait is the consumer's AckWait: a held message is sent InProgress
	// each time it has waited Config.InProgressFraction of it.
	AckWait time.Duration
	// MaxDeliver is the consumer's MaxDeliver (-1: unlimited): the delivery
	// on which a retriable failure becomes final.
	MaxDeliver int
}

// SetDeliveryLimits replaces the AckWait and MaxDeliver the consumer works
// with; it is safe to call while the consumer runs, and takes effect for
// the next heartbeat and the next settled delivery.
func (c *Loop) SetDeliveryLimits(l DeliveryLimits) error {
	if l.AckWait <= 0 {
		return fmt.Errorf("%w: AckWait %v", ErrConfig, l.AckWait)
	}
	if l.MaxDeliver < -1 || l.MaxDeliver == 0 {
		return fmt.Errorf("%w: MaxDeliver %d (use -1 for unlimited)", ErrConfig, l.MaxDeliver)
	}
	c.limits.Store(&l)
	return nil
}

// DeliveryLimits returns the AckWait and MaxDeliver in use.
func (c *Loop) DeliveryLimits() DeliveryLimits { return *c.limits.Load() }

// heartbeatEvery is how long a held message may wait before InProgress.
func (c *Loop) heartbeatEvery() time.Duration {
	return time.Duration(float64(c.limits.Load().AckWait) * c.cfg.InProgressFraction)
}

// finalDelivery reports whether delivery n is the last JetStream makes.
func (c *Loop) finalDelivery(n uint64) bool {
	l := c.limits.Load()
	return l.MaxDeliver > 0 && n >= uint64(l.MaxDeliver)
}
