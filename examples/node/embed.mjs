// jetembed from Node.js: one request-reply call to embed.v1.embed, then one
// queued job in EMBED_JOBS whose result comes back on its reply subject.
// Both speak JSON (Content-Type: application/json); results use the job's
// encoding. Run against `jetembed dev`:
//
//   cd examples/node && npm ci && NATS_URL=nats://127.0.0.1:4222 node embed.mjs
//
// Each step prints one JSON line on stdout.
import { connect, headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

const servers = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const nc = await connect({ servers, name: "jetembed-node-example" });

function jsonHeaders() {
  const h = headers();
  h.set("Content-Type", "application/json");
  return h;
}

// check fails on a job-level error, and on a result too large for one
// message (it names an object of the EMBED_BLOBS Object Store instead:
// read it with @nats-io/obj and decode it as the result; not done here).
function check(res) {
  if (res.error) {
    throw new Error(`job ${res.id}: ${res.error.code}: ${res.error.message}`);
  }
  if (res.blob) {
    throw new Error(`job ${res.id}: result stored as blob ${res.blob.name} (${res.blob.size} bytes)`);
  }
  return res;
}

function summary(path, res) {
  const it = res.items[0];
  return JSON.stringify({
    path,
    id: res.id,
    model: res.model,
    items: res.items.length,
    dense: it.dense?.length ?? 0,
    sparse: it.sparse?.ids.length ?? 0,
  });
}

// 1. Request-reply: the answer comes back on the request's own inbox.
const job = { id: "node-1", texts: ["hello from Node.js"], outputs: ["dense", "sparse"] };
const reply = await nc.request("embed.v1.embed", JSON.stringify(job), {
  headers: jsonHeaders(),
  timeout: 10_000,
});
console.log(summary("request", check(reply.json())));

// 2. A queued job: stored in EMBED_JOBS (Nats-Msg-Id = the job id drops a
// duplicate), embedded by any consumer, its result published to the reply
// subject (and stored in EMBED_RESULTS, under embed.results.>).
const run = `node${Date.now()}`;
const id = "q-1";
const replySubject = `embed.results.${run}.${id}`;
const sub = nc.subscribe(replySubject, { max: 1, timeout: 30_000 });
const js = jetstream(nc);
const ack = await js.publish(
  `embed.jobs.${run}`,
  JSON.stringify({ id, texts: ["queued from Node.js", "a second text"], reply: replySubject }),
  { headers: jsonHeaders(), msgID: id },
);
console.error(`queued job ${id} in ${ack.stream} (seq ${ack.seq})`);
for await (const m of sub) {
  console.log(summary("queued", check(m.json())));
}
await nc.drain();
