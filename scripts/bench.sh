#!/usr/bin/env bash
# bench.sh is `make bench`: it builds jetembed, generates the MiniLM-size
# `small` model into .deps/models/small-hidden if absent, installs the
# transformers.js peer (scripts/peer, pinned in its package.json) into
# .deps/peer with npm --ignore-scripts (onnxruntime-node's install script
# never runs; the peer uses the CPU libonnxruntime bundled in the
# onnxruntime-node package, the same ONNX Runtime version as .deps), runs the
# whole suite in one `jetembed bench` run and writes BENCHMARKS.md with the
# results, the machine and the exact command.
#
# Then the attention rewrite's figures: scripts/bench-attention.sh (per
# length class, graph vs fused: run time, attention share, peak RSS; one
# layer at BGE-M3's size; the 7.6k-token `embed --sessions 1 --threads 1`
# goal). Then two whole-process runs: scripts/bench-embed.sh (`jetembed
# embed` vs transformers.js on the mixed multilingual corpus: wall, CPU
# time, peak RSS; skipped without node) and scripts/bench-memory.sh (the
# memory goal of a `jetembed dev` process under a flood of 8k-token
# texts). make bench fails when the memory goal is missed, after writing
# the file.
#
# Environment: BENCH_TEXTS, BENCH_PEER_TEXTS, BENCH_REQUESTS, BENCH_SESSIONS,
# BENCH_THREADS size the run; BENCH_OUT is the file written (BENCHMARKS.md);
# EMBED_* (scripts/bench-embed.sh), ATTN_* (scripts/bench-attention.sh)
# and MEM_* (scripts/bench-memory.sh) size the whole-process runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
deps=$root/.deps
bin=$root/bin/jetembed
out=${BENCH_OUT:-BENCHMARKS.md}
texts=${BENCH_TEXTS:-250}
peer_texts=${BENCH_PEER_TEXTS:-80}
requests=${BENCH_REQUESTS:-100}
sessions=${BENCH_SESSIONS:-2}
threads=${BENCH_THREADS:-1}
export JETEMBED_ORT_LIB=${JETEMBED_ORT_LIB:-$deps/onnxruntime/libonnxruntime.so.1}

[ -x "$bin" ] || go build -o "$bin" ./cmd/jetembed

model=$deps/models/small-hidden
if [ ! -f "$model/model.onnx" ]; then
  echo "bench: generating the small model into $model"
  "$bin" genmodel --size small --layout hidden --out "$model"
fi

# BGE-M3's layer width with two layers: the int8 rows run on it too (int8's
# share of a layer depends on the layer's width, not on how many there are).
wide=$deps/models/m3-2layers-hidden
if [ ! -f "$wide/model.onnx" ]; then
  echo "bench: generating BGE-M3's layer shape (2 layers) into $wide"
  "$bin" genmodel --size m3 --layers 2 --layout hidden --out "$wide"
fi

peer_args=()
if command -v node >/dev/null && command -v npm >/dev/null; then
  peer=$deps/peer
  mkdir -p "$peer"
  if ! cmp -s scripts/peer/package.json "$peer/package.json" || [ ! -d "$peer/node_modules/@huggingface/transformers" ]; then
    echo "bench: installing the transformers.js peer into $peer"
    cp scripts/peer/package.json "$peer/package.json"
    (cd "$peer" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
  cp scripts/peer/peer.js "$peer/peer.js"
  peer_args=(--peer "$peer" --peer-texts "$peer_texts")
else
  echo "bench: node/npm not found; the transformers.js peer is skipped" >&2
fi

cmd=("$bin" bench --model "$model" --int8-model "$wide" --texts "$texts" --requests "$requests" --sessions "$sessions" --threads "$threads" "${peer_args[@]}")
printable="JETEMBED_ORT_LIB=.deps/onnxruntime/libonnxruntime.so.1 ${cmd[*]}"
printable=${printable//$root\//}
echo "bench: $printable"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
table=$("${cmd[@]}")
echo "bench: attention, fused vs graph (scripts/bench-attention.sh)"
attention_section=$(scripts/bench-attention.sh "$bin" "$model") || attention_section="bench-attention.sh failed; see its output above."
embed_section=
if [ ${#peer_args[@]} -gt 0 ]; then
  echo "bench: whole-process jetembed embed vs transformers.js (scripts/bench-embed.sh)"
  embed_section=$(EMBED_SESSIONS=$sessions EMBED_THREADS=$threads scripts/bench-embed.sh "$bin" "$model" "$peer")
  echo "bench: the same at BGE-M3's layer width, one round, no graph or batch 2 runs (scripts/bench-embed.sh)"
  wide_section=$(EMBED_SESSIONS=$sessions EMBED_THREADS=$threads EMBED_ROUNDS=1 EMBED_PEER_ONCE= EMBED_GRAPH=0 EMBED_NOTES=0 scripts/bench-embed.sh "$bin" "$wide" "$peer" | sed 1,2d) || wide_section="bench-embed.sh failed on $wide; see its output above."
  embed_section="$embed_section

#### The same at BGE-M3's layer width (\`jetembed genmodel --size m3 --layers 2\`)

$wide_section"
fi
echo "bench: memory under a flood of 8k-token texts (scripts/bench-memory.sh)"
mem_ok=true
memory=$(scripts/bench-memory.sh "$bin") || mem_ok=false
echo "bench: memory: $memory"
# Sections of the file made by other runs (## headings: the tokenizer,
# make bench-fleet) stay as they are.
kept=$( [ -f "$out" ] && sed -n '/^## /,$p' "$out" || true)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Whether the tree differs from HEAD, read before $out is rewritten (the
# output file itself does not count).
dirty=$(git diff --quiet HEAD -- . ":(exclude)$out" 2>/dev/null || echo ' (with uncommitted changes)')
{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` (scripts/bench.sh) on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$dirty."
  echo "Every figure below comes from this one run on this one machine; ratios compare measurements taken minutes apart in the same process."
  echo
  echo "Machine: $(nproc) CPU(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr), Go $(go env GOVERSION), ONNX Runtime from $(basename "$(readlink -f "$JETEMBED_ORT_LIB")") ($(ls -d "$deps"/onnxruntime-* 2>/dev/null | sed 's|.*/onnxruntime-||' | head -1)), node $(node --version 2>/dev/null || echo none), peer on the libonnxruntime bundled with onnxruntime-node $(node -p 'require("'"$deps"'/peer/node_modules/onnxruntime-node/package.json").version' 2>/dev/null || echo none)."
  echo "Load average (1, 5, 15 min) before / after the run: $load_before / $load_after."
  echo
  echo "Command:"
  echo
  echo '```'
  echo "$printable"
  echo '```'
  echo
  echo "$table"
  echo
  echo "$attention_section"
  if [ -n "$embed_section" ]; then
    echo
    echo "$embed_section"
  fi
  echo
  echo "### Memory: \`jetembed dev\` under a flood of 8k-token texts (tiny model)"
  echo
  echo "\`scripts/bench-memory.sh\`: a \`jetembed dev\` process (embedded nats-server + serve, 1 session, \`--memory-budget ${MEM_BUDGET:-2GiB}\`) fed by \`jetembed submit --job-size 1\` with ${MEM_TEXTS:-24} texts of ${MEM_WORDS:-6000} words of the parity corpus (over 8k tokens each, so each is cut to what the budget holds); /proc/PID/status of the dev process: VmRSS idle after one short job, VmHWM over the flood, VmRSS ${MEM_AFTER:-20} s after it. Goals: peak <= budget + model + 300 MiB, after <= 2 x idle."
  echo
  echo '```'
  echo "$memory"
  echo '```'
  echo
  if $mem_ok; then echo "Memory goal: met."; else echo "Memory goal: **missed** (or the run failed)."; fi
  cat <<'NOTES'

Reading these numbers:

- The machine may be shared (the load averages above say how busy it was). Other work slows whichever measurement runs while it happens; the rounds listed in the raw table show how much. That is why the bare engine and the pipeline alternate and keep their best, and why a ratio near 1 (pipeline efficiency) can come out slightly above 1.
- The corpus is small (a few hundred texts) to keep `make bench` within minutes on a 2-core CPU; a pipeline run then lasts seconds, so its start (worker, consumer, first pull) weighs more than it would in a long bulk run. On 2 cores anything else that runs during a timed run takes CPU from the sessions: the bench waits for the last result on a reader of the results stream, not by polling the server (polling every 2 ms cost ~10% of the pipeline rate).
- On a CPU, transformers.js at batch 1 pads nothing and a single-text session run costs about the same per token as a packed one; its larger batches lose to padding (the mixed lengths make batch 32 several times slower). jetembed's packing pays off against padded batches (the arrival-order and naive rows), not against batch 1.
- The peak RSS is the whole bench process: the engine's ONNX Runtime arenas (grown by the runs before the bulk run), the embedded nats-server with the queued jobs and results, and the producer. The figure to read is the growth during the bulk run over the RSS just before it.
NOTES
  if [ -n "$kept" ]; then
    echo
    echo "$kept"
  fi
} > "$out"
echo "bench: wrote $out"
$mem_ok || { echo "bench: the memory goal is missed" >&2; exit 1; }
