// peer.js is the transformers.js peer of `make bench`: it embeds the same
// texts with the same model files and thread count through
// @huggingface/transformers' feature-extraction pipeline (onnxruntime-node,
// CLS pooling, L2 normalized) at each batch size given, best of two rounds,
// and prints one JSON line:
// {"threads":N,"texts":T,"runs":[{"batch":B,"seconds":S,"texts_per_s":R,"dim":D,"rounds":[R1,R2]}]}.
//
// usage: node peer.js MODEL_DIR TEXTS.jsonl THREADS BATCHES(comma separated)
// MODEL_DIR is a directory in Hugging Face layout (config.json,
// tokenizer.json, tokenizer_config.json, onnx/model.onnx); TEXTS.jsonl holds
// one JSON string per line.
import fs from 'node:fs';
import path from 'node:path';
import { env, pipeline } from '@huggingface/transformers';

const [modelDir, textsPath, threadsArg, batchesArg] = process.argv.slice(2);
if (!modelDir || !textsPath || !threadsArg || !batchesArg) {
  console.error('usage: node peer.js MODEL_DIR TEXTS.jsonl THREADS BATCHES');
  process.exit(2);
}
const threads = Number(threadsArg);
const batches = batchesArg.split(',').map(Number);
const texts = fs.readFileSync(textsPath, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));

env.allowRemoteModels = false;
env.localModelPath = path.dirname(path.resolve(modelDir)) + '/';
const extractor = await pipeline('feature-extraction', path.basename(modelDir), {
  dtype: 'fp32',
  device: 'cpu',
  session_options: { intraOpNumThreads: threads, interOpNumThreads: 1 },
});

// Warm up every batch size once on the first texts, as jetembed warms its
// shapes before it is timed.
for (const b of batches) {
  await extractor(texts.slice(0, b), { pooling: 'cls', normalize: true });
}

// Each batch size is timed in two rounds and keeps its best, as jetembed's
// measurements do: other load on the machine slows whichever round it hits.
const rounds = 2;
const runs = [];
for (const b of batches) {
  let best = null;
  const rates = [];
  for (let r = 0; r < rounds; r++) {
    const start = process.hrtime.bigint();
    let dim = 0;
    for (let i = 0; i < texts.length; i += b) {
      const out = await extractor(texts.slice(i, i + b), { pooling: 'cls', normalize: true });
      dim = out.dims[1];
    }
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    rates.push(texts.length / seconds);
    if (best === null || seconds < best.seconds) {
      best = { batch: b, seconds, texts_per_s: texts.length / seconds, dim };
    }
  }
  runs.push({ ...best, rounds: rates });
}
console.log(JSON.stringify({ threads, texts: texts.length, runs }));
