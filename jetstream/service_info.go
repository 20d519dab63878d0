package jetstream

import (
	"encoding/json"

	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// InfoName is the info endpoint's name: every member of the service
// answers a request on [schema.SubjectInfo] (and its .<tenant> form) with
// its micro service info, as $SRV.INFO.embed would, but only to a reply
// its reply policy allows: micro's own $SRV handlers answer any reply
// subject with the embedder's permissions, so only operators may publish
// $SRV (see deploy/nats/accounts.conf); tenants (the gateway) read the
// members' capacity here ([client.Client.PingService]).
const InfoName = "info"

// info answers a request of the info endpoint with this member's info.
func (s *service) info(it queued) {
	body, err := json.Marshal(s.Service.Info())
	if err != nil {
		s.answerErr(it, schema.Errorf(schema.CodeInternal, "the info does not encode"))
		return
	}
	h := micro.Headers{schema.HeaderContentType: {schema.MediaTypeJSON}}
	if err := it.req.Respond(body, micro.WithHeaders(h)); err != nil {
		s.answerFailed(it.req, err)
	}
}
