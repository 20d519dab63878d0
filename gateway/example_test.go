package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/schema"
)

func ExampleNew() {
	// The fleet behind the gateway is a Requester: in cmd/jetembed the
	// producer client of package client over NATS (its ErrNoService wrapped
	// as gateway.ErrNoMember); here one that answers every text at once.
	gw, err := gateway.New(gateway.Config{
		Requester: staticFleet{},
		APIKey:    "secret",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()

	call := func(key, body string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/embeddings", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			fmt.Printf("%s %s", resp.Status, b)
			return
		}
		// Errors have the OpenAI shape on every route, with a stable code.
		var e struct {
			Error struct{ Type, Code, Param, Message string }
		}
		if err := json.Unmarshal(b, &e); err != nil {
			log.Fatal(err)
		}
		fmt.Println(strings.TrimSpace(strings.Join([]string{resp.Status, e.Error.Type, e.Error.Code, e.Error.Param}, " ")))
	}
	call("secret", `{"input": ["hello", "world"]}`)
	call("wrong", `{"input": "hello"}`)
	call("secret", `{"input": "hello", "dimensions": 256}`)

	stop() // Serve shuts down gracefully and returns nil
	if err := <-served; err != nil {
		log.Fatal(err)
	}
	// Output:
	// 200 OK {"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.6,0.8]},{"object":"embedding","index":1,"embedding":[0.6,0.8]}],"model":"bge-m3@0123456789ab","usage":{"prompt_tokens":6,"total_tokens":6}}
	// 401 Unauthorized authentication_error invalid_api_key
	// 400 Bad Request invalid_request_error dimensions_unsupported dimensions
}

// staticFleet answers every text of a job with the same two-dimensional
// unit vector, as a model named bge-m3@0123456789ab.
type staticFleet struct{}

func (staticFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res := &schema.Result{V: schema.Version, ID: job.ID, Model: "bge-m3@0123456789ab"}
	for range job.Texts {
		res.Items = append(res.Items, schema.Item{Dense: schema.Vector{0.6, 0.8}, Tokens: 3})
		res.Usage.Tokens += 3
	}
	return res, nil
}
