package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// gatewayTexts are embedded through the gateway and by `jetembed embed`.
var gatewayTexts = []string{"hello world", "the quick brown fox jumps over the lazy dog", "ünïcödé: 東京, naïve café", "x"}

// apiDev is `jetembed dev --http-api` on free ports.
type apiDev struct {
	*devRun
	api string // base URL of the HTTP API, http://host:port
}

// startAPIDev runs dev with the HTTP API on a free port and waits for the
// API's address in its JSON log and for the ready line.
func startAPIDev(ctx context.Context, t *testing.T, model string, extra ...string) *apiDev {
	t.Helper()
	d := startDev(ctx, t, model, append([]string{"--log-format", "json", "--http-api", "127.0.0.1:0"}, extra...)...)
	a := &apiDev{devRun: d}
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-d.done:
			t.Fatalf("dev exited early with %d: %s%s", code, d.out.String(), d.errOut.String())
		default:
		}
		addr := logValue(d.errOut.String(), "http api listening", "addr")
		if addr == "" || logValue(d.errOut.String(), "ready", "model") == "" {
			return fmt.Errorf("not ready yet")
		}
		a.api = "http://" + addr
		return nil
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dev output:\n%s%s", d.out.String(), d.errOut.String())
		}
	})
	return a
}

// httpJSON sends body (GET when empty) and decodes the JSON answer into v.
func httpJSON(t *testing.T, url, key, body string, v any) int {
	t.Helper()
	method := http.MethodGet
	if body != "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && json.Unmarshal(b, v) != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// localItems is `jetembed embed` on texts: the model in-process, no NATS.
func localItems(t *testing.T, model, outputs string, texts []string) []schema.Item {
	t.Helper()
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(map[string]string{"text": s})
		in.Write(append(b, '\n'))
	}
	code, out, errOut := run(t, in.String(), "embed", "--model", model, "--outputs", outputs, "--threads", "1", "--probe=false")
	if code != 0 {
		t.Fatalf("embed: exit %d: %s", code, errOut)
	}
	return decodeItems(t, out)
}

func near32(t *testing.T, what string, got []float64, want []float32) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-float64(want[i])) > 1e-5 {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestGatewayOpenAINodeClient points the official OpenAI Node client at
// `jetembed dev --http-api` (with an API key) and checks that it gets the
// vectors `jetembed embed` computes for the same texts.
func TestGatewayOpenAINodeClient(t *testing.T) {
	model := tinyModel(t, "tiny-hidden")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: the OpenAI Node client test needs Node.js (and `make deps`)")
	}
	modules := os.Getenv("JETEMBED_OPENAI_NODE")
	if modules == "" {
		modules = filepath.Join("..", "..", ".deps", "openai-node")
	}
	if _, err := os.Stat(filepath.Join(modules, "node_modules", "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not installed in %s: run `make deps`", modules)
	}
	const key = "sk-jetembed-test"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startAPIDev(ctx, t, model, "--api-key", key)
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if code := httpJSON(t, d.api+"/v1/models", key, "", &models); code != 200 || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %d %+v", code, models)
	}
	served := models.Data[0].ID

	textsJSON, _ := json.Marshal(gatewayTexts)
	nodeRun := func(apiKey string) map[string]any {
		cmd := exec.CommandContext(ctx, node, filepath.Join("..", "..", "scripts", "openai-node", "embed.cjs"), d.api+"/v1", string(textsJSON))
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(modules, "node_modules"), "OPENAI_API_KEY="+apiKey,
			"OPENAI_MODEL="+strings.SplitN(served, "@", 2)[0])
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v: %s", err, out)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("node output %q: %v", out, err)
		}
		return got
	}
	got := nodeRun(key)
	if e := got["errors"].(map[string]any); e["embed"] != nil {
		t.Fatalf("the OpenAI client failed: %v", e["embed"])
	}
	want := localItems(t, model, "dense", gatewayTexts)
	tokens := 0
	for i, it := range want {
		tokens += it.Tokens
		near32(t, fmt.Sprintf("single[%d]", i), toFloats(got["single"].([]any)[i]), it.Dense)
		b := got["batch"].([]any)[i].(map[string]any)
		if b["index"] != float64(i) {
			t.Errorf("batch item %d has index %v", i, b["index"])
		}
		near32(t, fmt.Sprintf("batch[%d]", i), toFloats(b["embedding"]), it.Dense)
	}
	if u := got["usage"].(map[string]any); u["prompt_tokens"] != float64(tokens) || u["total_tokens"] != float64(tokens) {
		t.Errorf("usage %v, want %d tokens", u, tokens)
	}
	if got["model"] != served {
		t.Errorf("model %v, want %s", got["model"], served)
	}
	if e, _ := got["errors"].(map[string]any)["tokenIds"].(map[string]any); e == nil || e["status"] != 400.0 || e["code"] != "token_ids_unsupported" {
		t.Errorf("token-id input: %v", got["errors"])
	}
	wrong := nodeRun("wrong")
	if e, _ := wrong["errors"].(map[string]any)["embed"].(map[string]any); e == nil || e["status"] != 401.0 || e["code"] != "invalid_api_key" {
		t.Errorf("wrong key: %v", wrong["errors"])
	}
}

func toFloats(v any) []float64 {
	var out []float64
	switch x := v.(type) {
	case []any:
		for _, f := range x {
			out = append(out, f.(float64))
		}
	case map[string]any: // a Float32Array serialized by JSON.stringify
		for i := range len(x) {
			out = append(out, x[fmt.Sprint(i)].(float64))
		}
	}
	return out
}

// seedAnswer is the list envelope of the BGE-M3 endpoints.
type seedAnswer struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string      `json:"object"`
		Index     int         `json:"index"`
		Embedding []float64   `json:"embedding"`
		ColBERT   [][]float64 `json:"colbert"`
		Sparse    *struct {
			Indices []uint32  `json:"indices"`
			Values  []float64 `json:"values"`
		} `json:"sparse"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// TestGatewaySeedEndpointsAndCommand checks /v1/sparse-embeddings and
// /v1/embeddings:both of `dev --http-api` against `jetembed embed`, then
// runs `jetembed gateway` as its own process-in-a-goroutine in front of
// the same fleet, with its metrics on the ops port.
func TestGatewaySeedEndpointsAndCommand(t *testing.T) {
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startAPIDev(ctx, t, model)
	want := localItems(t, model, "dense,sparse,colbert", gatewayTexts)
	input, _ := json.Marshal(map[string]any{"input": gatewayTexts, "colbert": true})

	// With curl when there is one, as the README shows it.
	post := func(path string) seedAnswer {
		var a seedAnswer
		if curl, err := exec.LookPath("curl"); err == nil {
			out, err := exec.CommandContext(ctx, curl, "-sS", "--fail-with-body", d.api+path, "-H", "Content-Type:application/json", "-d", string(input)).Output()
			if err != nil || json.Unmarshal(out, &a) != nil {
				t.Fatalf("curl %s: %v: %s", path, err, out)
			}
		} else if code := httpJSON(t, d.api+path, "", string(input), &a); code != 200 {
			t.Fatalf("%s: %d %+v", path, code, a)
		}
		if a.Object != "list" || len(a.Data) != len(want) {
			t.Fatalf("%s: %+v", path, a)
		}
		return a
	}
	sp, both := post("/v1/sparse-embeddings"), post("/v1/embeddings:both")
	for i, it := range want {
		for name, a := range map[string]seedAnswer{"sparse": sp, "both": both} {
			got := a.Data[i]
			if got.Index != i || got.Sparse == nil || fmt.Sprint(got.Sparse.Indices) != fmt.Sprint(it.Sparse.IDs) {
				t.Fatalf("%s[%d]: sparse %+v, want ids %v", name, i, got.Sparse, it.Sparse.IDs)
			}
			near32(t, name+" sparse values", got.Sparse.Values, it.Sparse.Weights)
			if len(got.ColBERT) != len(it.ColBERT) {
				t.Fatalf("%s[%d]: %d colbert rows, want %d", name, i, len(got.ColBERT), len(it.ColBERT))
			}
			for j := range it.ColBERT {
				near32(t, fmt.Sprintf("%s[%d] colbert[%d]", name, i, j), got.ColBERT[j], it.ColBERT[j])
			}
		}
		if sp.Data[i].Embedding != nil {
			t.Errorf("sparse[%d] carries a dense embedding", i)
		}
		near32(t, fmt.Sprintf("both[%d] dense", i), both.Data[i].Embedding, it.Dense)
	}

	// The standalone gateway, in front of the same fleet.
	gwLog := &lockedBuffer{}
	gwDone := make(chan int, 1)
	go func() {
		gwDone <- runMain(ctx, []string{"gateway", "--nats", d.url, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: gwLog})
	}()
	var api, ops string
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-gwDone:
			t.Fatalf("gateway exited with %d: %s", code, gwLog.String())
		default:
		}
		api, ops = logValue(gwLog.String(), "http api listening", "addr"), logValue(gwLog.String(), "http listening", "addr")
		if api == "" || ops == "" || logValue(gwLog.String(), "ready", "nats") == "" {
			return fmt.Errorf("gateway not ready")
		}
		return nil
	})
	resp, err := http.Get("http://" + api + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "ok") {
		t.Errorf("/health: %d %s", resp.StatusCode, body)
	}
	var dense seedAnswer
	if code := httpJSON(t, "http://"+api+"/v1/embeddings", "", `{"input":"x"}`, &dense); code != 200 {
		t.Fatalf("gateway /v1/embeddings: %d", code)
	}
	near32(t, "gateway dense", dense.Data[0].Embedding, want[3].Dense)
	resp, err = http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `jetembed_gateway_requests_total{endpoint="embeddings",status="200"} 1`) {
		t.Errorf("ops /metrics lacks the gateway's requests:\n%s", body)
	}
	cancel()
	select {
	case code := <-gwDone:
		if code != 0 {
			t.Errorf("gateway exit %d: %s", code, gwLog.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("gateway did not stop")
	}
}

// TestGatewayKeyNeverPrinted plants the API key in the environment and
// looks for it in --print-config, --help and a gateway run's log.
func TestGatewayKeyNeverPrinted(t *testing.T) {
	t.Setenv("JETEMBED_API_KEY", planted)
	for _, cmd := range []string{"gateway", "serve", "dev"} {
		code, out, errOut := runCmd(t, context.Background(), cmd, "--print-config")
		if code != 0 || !strings.Contains(out, "--api-key=<set>\tJETEMBED_API_KEY") {
			t.Errorf("%s --print-config: exit %d: %s%s", cmd, code, out, errOut)
		}
		checkNoSecret(t, cmd+" --print-config", out+errOut)
		_, out, errOut = runCmd(t, context.Background(), cmd, "--help")
		checkNoSecret(t, cmd+" --help", out+errOut)
	}
	srv := natstest.RunServer(t, natstest.WithoutJetStream())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"gateway", "--nats", srv.ClientURL(), "--listen", "127.0.0.1:0", "--http", "", "--log-format", "json", "--log-level", "debug"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: log})
	}()
	var api string
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if api = logValue(log.String(), "http api listening", "addr"); api == "" {
			return fmt.Errorf("no api address yet")
		}
		return nil
	})
	for _, key := range []string{planted, "wrong"} {
		// No fleet: 503 with the right key, 401 with the wrong one.
		want := map[string]int{planted: 503, "wrong": 401}[key]
		if code := httpJSON(t, "http://"+api+"/v1/embeddings", key, `{"input":"a"}`, nil); code != want {
			t.Errorf("key %q: %d, want %d", key, code, want)
		}
	}
	cancel()
	<-done
	checkNoSecret(t, "the gateway's log", log.String())
}
