package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/tidwall/gjson"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
)

// cluster is the 3-node NATS cluster of nats/nats.conf as real processes.
type cluster struct {
	nodes    []*natstest.Process
	names    []string
	monitors []int  // each node's monitoring (HTTP) port
	urls     string // tls://127.0.0.1:port,...
}

// startCluster runs three nats-server processes from nats/nats.conf (TLS,
// accounts.conf), each with its name, ports and routes on the command line.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	conf, err := filepath.Abs("nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	routePorts := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	c := &cluster{}
	var urls []string
	for i, p := range routePorts {
		name, mon := fmt.Sprintf("nats-%d", i), natstest.FreePort(t)
		n := natstest.StartProcess(t, "-c", conf, "-n", name, "-m", strconv.Itoa(mon),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", p), "--routes", strings.Join(routes, ","))
		c.nodes, c.names, c.monitors = append(c.nodes, n), append(c.names, name), append(c.monitors, mon)
		urls = append(urls, strings.Replace(n.URL(), "nats://", "tls://", 1))
	}
	c.urls = strings.Join(urls, ",")
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range c.nodes {
				t.Logf("%s log (tail):\n%s", c.names[i], testkit.Tail(n.Log(), 15))
			}
		}
	})
	return c
}

// connectAs connects to the cluster as user over TLS, reconnecting forever.
func (c *cluster) connectAs(t *testing.T, caFile, user string, opts ...nats.Option) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	opts = append(opts, nats.RootCAs(caFile), nats.UserInfo(user, password(user)),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	nc, err := nats.Connect(c.urls, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// settings is what provision decided and nobody else may change.
type settings struct {
	Replicas map[string]int
	AckWait  time.Duration
	Deliver  int
	Pending  int
	BackOff  string
}

// readSettings reads them, retrying while the cluster elects leaders.
func readSettings(t *testing.T, js natsjs.JetStream) settings {
	t.Helper()
	var s settings
	natstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s = settings{Replicas: map[string]int{}}
		for _, name := range []string{"EMBED_JOBS", "EMBED_RESULTS", "EMBED_DLQ", "KV_EMBED_ENGINES"} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			s.Replicas[name] = st.CachedInfo().Config.Replicas
		}
		c, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
		if err != nil {
			return err
		}
		cc := c.CachedInfo().Config
		s.AckWait, s.Deliver, s.Pending, s.BackOff = cc.AckWait, cc.MaxDeliver, cc.MaxAckPending, fmt.Sprint(cc.BackOff)
		return nil
	})
	return s
}

// TestDeployTopology runs what deploy/ describes: the 3-node cluster of
// nats/nats.conf with accounts.conf and TLS, the provision Job of k8s/ as
// the provisioner user, and two pods of the Deployment (warm-up init
// container, then serve) with the args and environment of the manifests
// and the ConfigMap. Only what must be local is replaced: the model path,
// the provider (no GPU here), URLs and ports, certificate and cache paths.
func TestDeployTopology(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and two serve processes")
	}
	bin := jetembedBinary(t)
	setPasswords(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := natstest.WriteTLS(t, dir)
	t.Setenv("NATS_TLS_CERT", certFile)
	t.Setenv("NATS_TLS_KEY", keyFile)
	t.Setenv("NATS_TLS_CA", caFile)
	c := startCluster(t)
	ctx := context.Background() // every wait below has its own bound
	_, pjs := c.connectAs(t, caFile, "provisioner")
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := pjs.AccountInfo(actx)
		return err
	})

	objs := k8s(t)
	cm := mustObj(t, objs, "ConfigMap/jetembed")
	dep := mustObj(t, objs, "Deployment/jetembed")
	job := mustObj(t, objs, "Job/jetembed-provision")
	model, _ := filepath.Abs("../testdata/models/tiny-hidden")
	local := map[string]string{
		"JETEMBED_NATS": c.urls, "JETEMBED_NATS_TLS_CA": caFile, "JETEMBED_MODEL": model,
		"JETEMBED_PROVIDER": "cpu", "JETEMBED_TRT_CACHE": t.TempDir(), "JETEMBED_ORT_LIB": os.Getenv("JETEMBED_ORT_LIB"),
	}

	// The provision Job, and compose runs the same command.
	pc := get(job, "spec", "template", "spec", "containers", 0)
	compose := loadYAML(t, "compose/docker-compose.yaml")[0]
	if got := fmt.Sprint(list(compose, "services", "provision", "command")); got != fmt.Sprint(list(pc, "args")) {
		t.Errorf("compose provisions with %s, the k8s Job with %v", got, list(pc, "args"))
	}
	penv := containerEnv(t, pc, cm, local)
	if penv["JETEMBED_NATS_USER"] != "provisioner" {
		t.Fatalf("the provision Job connects as %q, want provisioner", penv["JETEMBED_NATS_USER"])
	}
	out := run(t, "provision", bin, args(pc), penv)
	t.Logf("provision:\n%s", out)
	want := readSettings(t, pjs)
	for name, r := range want.Replicas {
		if r != 3 {
			t.Errorf("%s: replicas %d after the provision Job, want 3", name, r)
		}
	}

	// A backlog of two tenants before any consumer runs: the provision
	// Job makes per-tenant consumers, so KEDA's trigger reads the work
	// queue's message count from every node's monitoring endpoint, and
	// it counts every tenant's jobs.
	so := loadYAML(t, "keda/scaledobject.yaml")[0]
	const queuedA = 5
	for i := range queuedA {
		submit(t, ctx, prod(t, c, caFile, "producer-a"), fmt.Sprint("queued-", i))
	}
	submitAs(t, ctx, prod(t, c, caFile, "producer-b"), "producer-b", "queued-b")
	c.kedaBacklog(t, so, queuedA+1, c.names...)

	// Two pods: the warm-up init container, then the consumer.
	pod := get(dep, "spec", "template", "spec")
	inits := list(pod, "initContainers")
	main := get(pod, "containers", 0)
	var serves []*proc
	var ready []string
	for i := range 2 {
		for _, ic := range inits {
			run(t, fmt.Sprintf("pod%d/%s", i, str(ic, "name")), bin, args(ic), containerEnv(t, ic, cm, local))
		}
		port := natstest.FreePort(t)
		local["JETEMBED_HTTP"] = fmt.Sprintf("127.0.0.1:%d", port)
		env := containerEnv(t, main, cm, local)
		if env["JETEMBED_NATS_USER"] != "embedder" || env["JETEMBED_PROVISION"] != "off" {
			t.Errorf("the consumer runs as %q with JETEMBED_PROVISION=%q, want embedder and off", env["JETEMBED_NATS_USER"], env["JETEMBED_PROVISION"])
		}
		serves = append(serves, start(t, fmt.Sprintf("pod%d/%s", i, str(main, "name")), bin, args(main), env))
		ready = append(ready, fmt.Sprintf("http://127.0.0.1:%d%s", port, str(main, "readinessProbe", "httpGet", "path")))
	}
	for i, url := range ready {
		waitReady(t, serves[i], url)
	}
	for _, s := range serves {
		if strings.Contains(s.Log.String(), "differs from the flags") {
			t.Errorf("%s warns of drift: the ConfigMap disagrees with the provision Job:\n%s", s.name, s.Log.String())
		}
	}
	if got := readSettings(t, pjs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after two consumers started: %+v, provisioned %+v", got, want)
	}

	// producer-a: a request and a queued job, with its own permissions.
	pnc, pjsA := c.connectAs(t, caFile, "producer-a", nats.CustomInboxPrefix("_INBOX_producer-a"))
	requestEmbed(t, pnc)
	sub, err := pnc.SubscribeSync("embed.results.producer-a.>")
	if err != nil {
		t.Fatal(err)
	}
	submit(t, ctx, pjsA, "first")
	// The backlog queued before the consumers started may still be
	// answered on this subject: its results come before or after first's
	// (all of them are counted below).
	for {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("producer-a: no result for its job: %v", err)
		}
		var r struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m.Data, &r) == nil && strings.HasPrefix(r.ID, "queued-") {
			continue
		}
		checkResultJSON(t, m.Data, "first")
		break
	}

	// The gateway Deployment, as its own NATS user, in front of them.
	gatewayThrough(t, bin, objs, cm, local)

	// A node dies while jobs are queued and running: every job gets its
	// result all the same. Jobs the dying node had just sent to a consumer
	// never arrive and come back after the consumer's AckWait (30s in the
	// provision Job), so this takes up to that long.
	const n = 30
	for i := range n {
		submit(t, ctx, pjsA, fmt.Sprint("job-", i))
	}
	leader := streamLeader(t, ctx, pjs, "EMBED_JOBS")
	i := slices.Index(c.names, leader)
	if i < 0 {
		t.Fatalf("EMBED_JOBS leader %q is not a node of the cluster %v", leader, c.names)
	}
	c.nodes[i].Kill()
	t.Logf("killed %s, the EMBED_JOBS leader", leader)
	natstest.CheckFor(t, 75*time.Second, 200*time.Millisecond, func() error {
		got, err := resultsFor(ctx, pjs)
		if err != nil {
			return err
		}
		if got < n+1+queuedA {
			return fmt.Errorf("%d of %d jobs have a result", got, n+1+queuedA)
		}
		return nil
	})
	var alive []string
	for k, name := range c.names {
		if k != i {
			alive = append(alive, name)
		}
	}
	// Every job answered and acknowledged: the trigger reads no backlog.
	c.kedaBacklog(t, so, 0, alive...)
	for i, s := range serves {
		if !s.Running() {
			t.Errorf("%s exited after a node was killed: %v", s.name, s.Err())
		}
		waitReady(t, s, ready[i])
	}
	if got := readSettings(t, pjs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("at the end: %+v, provisioned %+v", got, want)
	}
}

func waitReady(t *testing.T, p *proc, url string) {
	t.Helper()
	natstest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if !p.Running() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.Err(), p.Log.String())
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", url, resp.StatusCode)
		}
		return nil
	})
}

// submit queues one JSON job whose result goes to producer-a's subject.
func submit(t *testing.T, ctx context.Context, js natsjs.JetStream, id string) {
	t.Helper()
	submitAs(t, ctx, js, "producer-a", id)
}

// submitAs queues one JSON job of tenant whose result goes to its subject.
func submitAs(t *testing.T, ctx context.Context, js natsjs.JetStream, tenant, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"v":1,"id":%q,"texts":["text of %s"],"reply":"embed.results.%s.%s"}`, id, id, tenant, id)
	m := &nats.Msg{Subject: "embed.jobs." + tenant, Data: []byte(body), Header: nats.Header{"Content-Type": []string{"application/json"}}}
	natstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		_, err := js.PublishMsg(ctx, m, natsjs.WithMsgID(id))
		return err
	})
}

func requestEmbed(t *testing.T, nc *nats.Conn) {
	t.Helper()
	m := &nats.Msg{Subject: "embed.v1.embed.producer-a", Data: []byte(`{"v":1,"id":"req","texts":["a request"]}`),
		Header: nats.Header{"Content-Type": []string{"application/json"}}}
	resp, err := nc.RequestMsg(m, 20*time.Second)
	if err != nil {
		t.Fatalf("producer-a: request: %v", err)
	}
	checkResultJSON(t, resp.Data, "req")
}

func checkResultJSON(t *testing.T, data []byte, id string) {
	t.Helper()
	var r struct {
		ID    string `json:"id"`
		Items []struct {
			Dense []float32 `json:"dense"`
		} `json:"items"`
		Error any `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("result %s: %v: %s", id, err, data)
	}
	if r.ID != id || r.Error != nil || len(r.Items) != 1 || len(r.Items[0].Dense) == 0 {
		t.Fatalf("result for %s: %s", id, data)
	}
}

func streamLeader(t *testing.T, ctx context.Context, js natsjs.JetStream, stream string) string {
	t.Helper()
	var leader string
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader != "" {
			leader = info.Cluster.Leader
			return nil
		}
		return errors.New("no leader")
	})
	return leader
}

// resultsFor counts the distinct producer-a result subjects stored in
// EMBED_RESULTS (one per job: results dedupe there).
func resultsFor(ctx context.Context, js natsjs.JetStream) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, natsjs.WithSubjectFilter("embed.results.producer-a.>"))
	if err != nil {
		return 0, err
	}
	return len(info.State.Subjects), nil
}

// gatewayThrough runs the container of the gateway Deployment with its
// manifest's args and environment (only the URLs, the CA and the ports
// replaced) and calls it as a client of the Service would: embeddings and
// rerank with the API key, /health without it, /readyz on the ops port.
// It connects as the gateway user and stays inside its permissions.
func gatewayThrough(t *testing.T, bin string, objs map[string]obj, cm obj, local map[string]string) {
	t.Helper()
	gw := mustObj(t, objs, "Deployment/jetembed-gateway")
	svc := mustObj(t, objs, "Service/jetembed-gateway")
	mustObj(t, objs, "HorizontalPodAutoscaler/jetembed-gateway")
	c := get(gw, "spec", "template", "spec", "containers", 0)
	apiPort, opsPort := natstest.FreePort(t), natstest.FreePort(t)
	loc := map[string]string{"JETEMBED_NATS": local["JETEMBED_NATS"], "JETEMBED_NATS_TLS_CA": local["JETEMBED_NATS_TLS_CA"],
		"JETEMBED_LISTEN": fmt.Sprintf("127.0.0.1:%d", apiPort), "JETEMBED_HTTP": fmt.Sprintf("127.0.0.1:%d", opsPort)}
	env := containerEnv(t, c, cm, loc)
	if env["JETEMBED_NATS_USER"] != "gateway" || env["JETEMBED_TENANT"] != "gateway" || env["JETEMBED_MODEL"] != "" {
		t.Errorf("the gateway runs as user %q, tenant %q, model %q: want gateway, gateway and no model", env["JETEMBED_NATS_USER"], env["JETEMBED_TENANT"], env["JETEMBED_MODEL"])
	}
	var ports []string
	for _, p := range list(svc, "spec", "ports") {
		ports = append(ports, fmt.Sprint(get(p, "targetPort")))
	}
	if !slices.Contains(ports, "api") || !slices.Contains(ports, "http") {
		t.Errorf("the gateway Service targets %v, want api and http", ports)
	}
	p := start(t, "gateway", bin, args(c), env)
	waitReady(t, p, fmt.Sprintf("http://127.0.0.1:%d%s", opsPort, str(c, "readinessProbe", "httpGet", "path")))
	key := password("gateway-api")
	call := func(path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", apiPort, path), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	natstest.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		if code, b := call("/v1/embeddings", `{"input":["through the gateway","twice"]}`); code != 200 {
			return fmt.Errorf("/v1/embeddings: %d %s", code, b)
		}
		return nil
	})
	if code, b := call("/rerank", `{"query":"which","texts":["this one","that one"]}`); code != 200 || !strings.HasPrefix(string(b), "[{") {
		t.Errorf("/rerank through the gateway: %d %s", code, b)
	}
	if code, b := call("/tokenize", `{"inputs":"a b"}`); code != 200 {
		t.Errorf("/tokenize through the gateway: %d %s", code, b)
	}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/embeddings", apiPort), strings.NewReader(`{"input":"x"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a call without the key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", apiPort)); err != nil || resp.StatusCode != 200 {
		t.Errorf("/health: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if l := strings.ToLower(p.Log.String()); strings.Contains(l, "permission") || strings.Contains(l, "nats async error") {
		t.Errorf("the gateway logged a permission problem:\n%s", p.Log.String())
	}
}

// prod is a JetStream context of tenant user's own connection.
func prod(t *testing.T, c *cluster, caFile, user string) natsjs.JetStream {
	t.Helper()
	_, js := c.connectAs(t, caFile, user, nats.CustomInboxPrefix("_INBOX_"+user))
	return js
}

// kedaBacklog reads the ScaledObject's metrics-api trigger as KEDA does,
// from the monitoring endpoint of each named node (its URL's host and port
// replaced by the node's), until every one reports want.
func (c *cluster) kedaBacklog(t *testing.T, so obj, want int64, nodes ...string) {
	t.Helper()
	md := get(list(so, "spec", "triggers")[0], "metadata")
	u, err := url.Parse(str(md, "url"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range nodes {
		k := slices.Index(c.names, name)
		u.Host = fmt.Sprintf("127.0.0.1:%d", c.monitors[k])
		natstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			got, err := metricsAPIValue(u.String(), str(md, "valueLocation"))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if got != want {
				return fmt.Errorf("%s: the KEDA trigger reads %d, want %d", name, got, want)
			}
			return nil
		})
	}
}

// metricsAPIValue is what KEDA's metrics-api scaler reads (format json):
// the number at GJSON path loc of the document at addr.
func metricsAPIValue(addr, loc string) (int64, error) {
	resp, err := http.Get(addr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	v := gjson.GetBytes(body, loc)
	if !v.Exists() || v.Type != gjson.Number {
		return 0, fmt.Errorf("%s: %q is not a number in %.300s", addr, loc, body)
	}
	return v.Int(), nil
}
