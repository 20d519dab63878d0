#!/usr/bin/env bash
# bench-tokenizer.sh compares the pure-Go tokenizer with HuggingFace
# tokenizers (Rust, through the Node oracle) on the same ~1 MB multilingual
# text: single-threaded and batch on all cores. Prints tokens/s and ratios.
# Usage: scripts/bench-tokenizer.sh [TOKENIZER_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
TOK=${1:-testdata/tokenizers/xlmr-unigram.json}
ORACLE=${JETEMBED_HF_ORACLE:-$PWD/.deps/hf-oracle}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The same texts BenchmarkEncode* uses: the parity corpus repeated to 1 MiB.
/usr/bin/env python3 - engine/tokenizer/testdata/parity/corpus.jsonl "$WORK/in.jsonl" <<'PYEOF'
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
size, out = 0, []
while size < 1 << 20:
    for l in lines:
        out.append(l)
        size += len(json.loads(l)["text"].encode())
open(sys.argv[2], "w", encoding="utf-8").writelines(out)
PYEOF

rate() { grep -o '[0-9.e+]* tokens/s' | head -1 | cut -d' ' -f1; }
echo "tokenizer: $TOK, input: $(wc -c <"$WORK/in.jsonl") bytes of JSONL"
go_seq=$(JETEMBED_BENCH_TOKENIZER="$TOK" go test ./engine/tokenizer/ -run '^$' -bench 'BenchmarkEncodeSequential$' -benchtime 5x -cpu 1 | tee /dev/stderr | rate)
go_batch=$(JETEMBED_BENCH_TOKENIZER="$TOK" go test ./engine/tokenizer/ -run '^$' -bench 'BenchmarkEncodeBatch$' -benchtime 5x | tee /dev/stderr | rate)
hf_seq=$(RAYON_NUM_THREADS=1 node "$ORACLE/bench.js" "$TOK" "$WORK/in.jsonl" sequential | tee /dev/stderr | rate)
hf_batch1=$(RAYON_NUM_THREADS=1 node "$ORACLE/bench.js" "$TOK" "$WORK/in.jsonl" batch | tee /dev/stderr | rate)
hf_batch=$(node "$ORACLE/bench.js" "$TOK" "$WORK/in.jsonl" batch | tee /dev/stderr | rate)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
printf '\n%-34s %14s\n' "" "tokens/s"
printf '%-34s %14.0f\n' "go single-thread (Encode loop)" "$go_seq"
printf '%-34s %14.0f\n' "hf sequential (1 thread)" "$hf_seq"
printf '%-34s %14.0f\n' "hf encodeBatch (1 thread)" "$hf_batch1"
printf '%-34s %14.0f\n' "go EncodeBatch ($(nproc) cores)" "$go_batch"
printf '%-34s %14.0f\n' "hf encodeBatch ($(nproc) cores)" "$hf_batch"
echo
echo "go single / hf sequential:     $(ratio "$go_seq" "$hf_seq")"
echo "go single / hf batch 1 thread: $(ratio "$go_seq" "$hf_batch1")"
echo "go batch / hf batch:           $(ratio "$go_batch" "$hf_batch")"
