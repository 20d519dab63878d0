package natstest

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Domain is a hub server whose JetStream has a domain and a leaf node
// server, with a JetStream of its own in another domain, connected to it.
// A client on the leaf reaches the hub's JetStream only through the hub's
// domain (nats.go's jetstream.NewWithDomain), as a pod beside a leaf node
// does.
type Domain struct {
	Hub, Leaf *server.Server
	// HubDomain and LeafDomain name the two JetStream domains.
	HubDomain, LeafDomain string
}

// RunDomain starts a [Domain] ("hub" and "spoke") on loopback and waits
// for the leaf to connect; both shut down at cleanup.
func RunDomain(t testing.TB) *Domain {
	t.Helper()
	d := &Domain{HubDomain: "hub", LeafDomain: "spoke"}
	ho := DefaultOptions(t.TempDir())
	ho.JetStreamDomain = d.HubDomain
	ho.LeafNode.Host, ho.LeafNode.Port = "127.0.0.1", FreePort(t)
	d.Hub = RunServerWithOptions(t, ho)
	lu, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", ho.LeafNode.Port))
	if err != nil {
		t.Fatal(err)
	}
	lo := DefaultOptions(t.TempDir())
	lo.JetStreamDomain = d.LeafDomain
	lo.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{lu}}}
	d.Leaf = RunServerWithOptions(t, lo)
	CheckFor(t, readyTimeout, 20*time.Millisecond, func() error {
		if d.Leaf.NumLeafNodes() == 0 {
			return errors.New("natstest: the leaf node has not connected to the hub")
		}
		return nil
	})
	return d
}
