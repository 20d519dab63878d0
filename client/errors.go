package client

import "errors"

var (
	// ErrNoService means no process of the embed service answered a
	// request: nothing serves the endpoint.
	ErrNoService = errors.New("no embed service answered")
	// ErrBadResult means a result does not decode; [Client.Results]
	// yields it and goes on.
	ErrBadResult = errors.New("result does not decode")
	// ErrForeignResult means a message in the results stream is not a
	// result the fleet wrote for its subject: its Nats-Msg-Id is not the
	// identity the embedder gives the result of that tenant, subject and
	// job id ([schema.ResultMsgID]). [Client.Results] yields it, without
	// the message's content, and goes on; it is no job's result.
	ErrForeignResult = errors.New("not a result of the fleet")
	// ErrBlob means a result stored as a blob could not be fetched: gone
	// (past the bucket's TTL), too large, or not what the reference says.
	ErrBlob = errors.New("result blob not fetched")
	// ErrResultsConsumers means every results consumer name of the tenant
	// is in use: the server grants each tenant a few
	// ([schema.DefaultResultsConsumers]), so no tenant takes the results
	// stream's consumers from the others.
	ErrResultsConsumers = errors.New("no results consumer of the tenant free")
)
