package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// BenchmarkEmbeddingsCall is one HTTP call of 32 short inputs through the
// gateway to a fake fleet member on a real nats-server and back: the cost
// the gateway and request-reply add around the model.
func BenchmarkEmbeddingsCall(b *testing.B) {
	for _, format := range []string{"float", "base64"} {
		b.Run(format, func(b *testing.B) {
			r := newRig(b, true, nil)
			inputs := make([]string, 32)
			for i := range inputs {
				inputs[i] = fmt.Sprintf("input number %d of the benchmark", i)
			}
			body := fmt.Sprintf(`{"input":["%s"],"encoding_format":"%s"}`, strings.Join(inputs, `","`), format)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				resp, err := http.Post(r.url+"/v1/embeddings", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkFleetRequest is the same 32 inputs as one request-reply job
// without HTTP: the baseline of BenchmarkEmbeddingsCall.
func BenchmarkFleetRequest(b *testing.B) {
	r := newRig(b, true, nil)
	c, err := client.New(r.nc)
	if err != nil {
		b.Fatal(err)
	}
	inputs := make([]string, 32)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("input number %d of the benchmark", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Request(context.Background(), schema.NewJob("bench", inputs...)); err != nil {
			b.Fatal(err)
		}
	}
}
