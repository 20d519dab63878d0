// batches.cjs sends batches of texts to jetembed's HTTP gateway through the
// official OpenAI Node client at its default settings (its own retries and
// timeout), as a RAG framework indexing documents would. Used by
// TestGatewayOpenAINodeBatches in cmd/jetembed; run it by hand with
//
//   NODE_PATH=.deps/openai-node/node_modules node scripts/openai-node/batches.cjs \
//     http://127.0.0.1:8081/v1 batches.json
//
// where batches.json is {"name": ["text", ...], ...}. It prints one JSON
// object: for each batch, {ok, n (vectors), ms} or {ok: false, status, code,
// message, ms}.
'use strict';
const fs = require('fs');
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, file] = process.argv.slice(2);
  const batches = JSON.parse(fs.readFileSync(file, 'utf8'));
  const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || 'none' });
  const model = process.env.OPENAI_MODEL || 'bge-m3';
  const out = {};
  for (const [name, input] of Object.entries(batches)) {
    const start = Date.now();
    try {
      const r = await client.embeddings.create({ model, input });
      out[name] = { ok: true, n: r.data.length, ms: Date.now() - start };
    } catch (e) {
      out[name] = { ok: false, status: e.status, code: e.code, message: e.message, ms: Date.now() - start };
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
