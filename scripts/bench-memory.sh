#!/usr/bin/env bash
# bench-memory.sh is the memory goal of issue 13 (point 4), measured on a
# real process: `jetembed dev` (embedded nats-server + serve) on the tiny
# model with --memory-budget BUDGET, fed by `jetembed submit` with a flood of
# ~8k-token texts. It reads /proc/PID/status of the dev process: VmRSS when
# idle (after one short job), VmHWM over the flood, VmRSS 20 s after it.
# Goals: peak <= budget + model + 300 MiB; after <= 2 x idle. It prints one
# JSON line and exits 1 if a goal is missed.
#
# Usage: scripts/bench-memory.sh [BIN] (default bin/jetembed). Environment:
# MEM_BUDGET (2GiB), MEM_TEXTS (24), MEM_WORDS (words a text, 6000),
# MEM_AFTER (seconds after the flood, 20), MEM_ARGS (more dev flags).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin/jetembed}
budget=${MEM_BUDGET:-2GiB}
texts=${MEM_TEXTS:-24}
words=${MEM_WORDS:-6000}
after=${MEM_AFTER:-20}
model=testdata/models/tiny-hidden
export JETEMBED_ORT_LIB=${JETEMBED_ORT_LIB:-$PWD/.deps/onnxruntime/libonnxruntime.so.1}
work=$(mktemp -d)
dev=
cleanup() {
  if [ -n "$dev" ]; then kill "$dev" 2>/dev/null || true; wait "$dev" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=nats://127.0.0.1:$port
# shellcheck disable=SC2086
"$bin" dev --model "$model" --listen "127.0.0.1:$port" --data "$work/data" --http "" --http-api "" \
  --memory-budget "$budget" ${MEM_ARGS:-} >"$work/dev.log" 2>&1 &
dev=$!
for _ in $(seq 300); do
  if "$bin" submit --nats "$url" --text "ready?" >/dev/null 2>&1; then break; fi
  kill -0 "$dev" 2>/dev/null || { cat "$work/dev.log" >&2; exit 1; }
  sleep 0.2
done
status() { awk -v k="$1:" '$1 == k {print $2 * 1024}' "/proc/$dev/status"; }

# One short job through the same path as the flood, then idle for a moment.
echo '{"text":"how do I reset my password?"}' >"$work/one.jsonl"
"$bin" submit --nats "$url" --out /dev/null "$work/one.jsonl" 2>/dev/null
sleep 2
idle=$(status VmRSS)
echo 5 >"/proc/$dev/clear_refs" # VmHWM := VmRSS

python3 - "$texts" "$words" >"$work/flood.jsonl" <<'PY'
import json, random, sys
n, k = int(sys.argv[1]), int(sys.argv[2])
random.seed(7)
vocab = [w for l in open("engine/tokenizer/testdata/parity/corpus.jsonl", encoding="utf-8")
         for w in json.loads(l)["text"].split()]
for i in range(n):
    print(json.dumps({"id": f"long-{i}", "text": " ".join(random.choice(vocab) for _ in range(k))}, ensure_ascii=False))
PY
start=$(date +%s.%N)
"$bin" submit --nats "$url" --job-size 1 --out "$work/flood.out" "$work/flood.jsonl" 2>/dev/null
secs=$(python3 -c "import time; print(round(time.time() - $start, 1))")
peak=$(status VmHWM)
sleep "$after"
rest=$(status VmRSS)
answered=$(grep -c . "$work/flood.out" || true)
cut=$(grep -c '"truncated":true' "$work/flood.out" || true)

model_bytes=$(du -bL "$model" | cut -f1)
budget_bytes=$(python3 -c "import re,sys; s='$budget'; m=re.fullmatch(r'([0-9.]+)\s*([KMGT]?i?B?)', s, re.I); u=m.group(2).upper().rstrip('B'); f={'':1,'K':1e3,'KI':1024,'M':1e6,'MI':1<<20,'G':1e9,'GI':1<<30,'T':1e12,'TI':1<<40}[u]; print(int(float(m.group(1))*f))")
limit=$((budget_bytes + model_bytes + 300 * 1048576))
python3 - <<PY
import json
idle, peak, rest, limit = $idle, $peak, $rest, $limit
ok_peak, ok_rest = peak <= limit, rest <= 2 * idle
print(json.dumps({"budget": "$budget", "texts": $texts, "answered": $answered, "truncated": $cut, "flood_s": $secs,
  "idle_mib": round(idle / 2**20), "peak_mib": round(peak / 2**20), "peak_limit_mib": round(limit / 2**20),
  "after_${after}s_mib": round(rest / 2**20), "after_limit_mib": round(2 * idle / 2**20),
  "peak_ok": ok_peak, "after_ok": ok_rest}))
raise SystemExit(0 if ok_peak and ok_rest and $answered == $texts else 1)
PY
