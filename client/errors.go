package client

import "errors"

var (
	// ErrNoService means no process of the embed service answered a
	// request: nothing serves the endpoint.
	ErrNoService = errors.New("no embed service answered")
	// ErrBadResult means a result does not decode; [Client.Results]
	// yields it and goes on.
	ErrBadResult = errors.New("result does not decode")
	// ErrBlob means a result stored as a blob could not be fetched: gone
	// (past the bucket's TTL), too large, or not what the reference says.
	ErrBlob = errors.New("result blob not fetched")
)
