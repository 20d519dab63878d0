// one pass over TEXTS at BATCH with THREADS intra-op threads, as a user would
// run transformers.js on a file: the whole process is timed from outside.
import fs from 'node:fs';
import path from 'node:path';
import { env, pipeline } from '@huggingface/transformers';
const [modelDir, textsPath, threads, batch] = process.argv.slice(2);
const texts = fs.readFileSync(textsPath, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
env.allowRemoteModels = false;
env.localModelPath = path.dirname(path.resolve(modelDir)) + '/';
const ex = await pipeline('feature-extraction', path.basename(modelDir), { dtype: 'fp32', device: 'cpu',
  session_options: { intraOpNumThreads: Number(threads), interOpNumThreads: 1 } });
const b = Number(batch);
let n = 0;
for (let i = 0; i < texts.length; i += b) {
  const out = await ex(texts.slice(i, i + b), { pooling: 'cls', normalize: true });
  n += out.dims[0];
}
console.log(n);
