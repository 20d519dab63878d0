// embed.cjs drives jetembed's HTTP gateway with the official OpenAI Node
// client, as a RAG framework would. Used by the gateway test in
// cmd/jetembed; run it by hand with
//
//   NODE_PATH=.deps/openai-node/node_modules node scripts/openai-node/embed.cjs \
//     http://127.0.0.1:8081/v1 '["hello","world"]'
//
// It prints one JSON object: the vectors of the texts asked one by one (a
// string input, the client's default base64 encoding), asked together (an
// array input, encoding_format float), the usage of the array call, and the
// error the client raised for token-id input and, when OPENAI_API_KEY is
// "wrong", for the key.
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, textsJSON] = process.argv.slice(2);
  const texts = JSON.parse(textsJSON);
  const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || 'none', maxRetries: 0, timeout: 30000 });
  const model = process.env.OPENAI_MODEL || 'bge-m3';
  const out = { single: [], batch: [], usage: null, errors: {} };
  try {
    for (const t of texts) {
      const r = await client.embeddings.create({ model, input: t });
      out.single.push(Array.from(r.data[0].embedding));
    }
    const r = await client.embeddings.create({ model, input: texts, encoding_format: 'float' });
    out.batch = r.data.map((d) => ({ index: d.index, embedding: d.embedding }));
    out.usage = r.usage;
    out.model = r.model;
  } catch (e) {
    out.errors.embed = { status: e.status, type: e.type, code: e.code, message: e.message };
  }
  try {
    await client.embeddings.create({ model, input: [[1, 2, 3]] });
  } catch (e) {
    out.errors.tokenIds = { status: e.status, type: e.type, code: e.code, message: e.message };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
