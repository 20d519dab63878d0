#!/usr/bin/env bash
# bench-attention.sh measures the attention rewrite (docs/architecture.md,
# "Attention: fused or graph") and prints a Markdown section:
#
# 1. Per length class, graph vs fused: engine/ort's TestAttentionClasses
#    runs each shape in a child process of its own (one session, 1 thread
#    by default): the faster of two runs, their peak RSS growth, and the
#    share of a third run ONNX Runtime's profiler puts in the attention
#    blocks. ATTN_SHAPES picks the shapes (batch > 1 is
#    padded); ATTN_M3=1 (the default) adds one attention layer at BGE-M3's
#    size (hidden 1024, 16 heads) at 8192 tokens, whose graph form needs
#    about 8 GiB.
# 2. The long-text goal: one text of ~7.6k tokens (ATTN_TOKENS) of the
#    tokenizer parity corpus through `jetembed embed --sessions 1 --threads
#    1`, --attention graph and fused alternating for ATTN_ROUNDS (2)
#    rounds, each a whole process timed by /usr/bin/time. Goals: fused peak
#    RSS <= 800 MiB, and >= 2.5x faster than the graph in the same run.
#
# Usage: scripts/bench-attention.sh BIN MODEL_DIR (the MiniLM-size model of
# make bench).
set -euo pipefail
bin=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
shapes=${ATTN_SHAPES:-1x512,1x2048,1x5700,1x8192,4x2048}
m3=${ATTN_M3:-1}
rounds=${ATTN_ROUNDS:-2}
tokens=${ATTN_TOKENS:-7600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

m3flag=false
[ "$m3" = 1 ] && m3flag=true
(cd "$root" && go test -count=1 -timeout 30m -v -run '^TestAttentionClasses$' ./engine/ort/ \
  -args -attention.model "$(readlink -f "$model")" -attention.shapes "$shapes" -attention.m3="$m3flag" -attention.threads "${ATTN_THREADS:-1}") >"$work/classes" 2>&1 || {
  echo "bench-attention: the classes benchmark failed:" >&2
  tail -20 "$work/classes" >&2
  exit 1
}

# The long text: the shortest run of the parity corpus's words from word
# 1000 on that tokenizes to at least $tokens tokens.
python3 - "$bin" "$model/tokenizer.json" "$tokens" "$root/engine/tokenizer/testdata/parity/corpus.jsonl" "$work/long.jsonl" <<'PY'
import json, subprocess, sys
bin_, tok, want, corpus, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
words = [w for l in open(corpus, encoding="utf-8") for w in json.loads(l)["text"].split()]
def line(n): return json.dumps({"text": " ".join(words[1000:1000 + n])}, ensure_ascii=False) + "\n"
def count(n):
    r = subprocess.run([bin_, "tokenize", "--tokenizer", tok, "--max-tokens", "-1"], input=line(n), capture_output=True, text=True, check=True)
    return len(json.loads(r.stdout)["ids"])
lo, hi = 1, len(words) - 1000
while lo < hi:
    mid = (lo + hi) // 2
    if count(mid) < want: lo = mid + 1
    else: hi = mid
open(out, "w", encoding="utf-8").write(line(lo))
print(count(lo), file=open(out + ".tokens", "w"))
PY
long_tokens=$(cat "$work/long.jsonl.tokens")

for r in $(seq "$rounds"); do
  for a in graph fused; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    ok=ok
    /usr/bin/time -o "$work/time" -f "%e %U %S %M" "$bin" embed --model "$model" --sessions 1 --threads 1 --attention "$a" "$work/long.jsonl" >"$work/out" 2>"$work/err" || ok=failed
    [ "$ok" = ok ] && { grep -q '"dense"' "$work/out" || ok=failed; }
    read -r wall user sys rss <"$work/time" || true
    echo "$a $wall $user $sys $rss $load $ok" >>"$work/runs"
  done
done

echo "### Attention: the fused form against the graph"
echo
echo "Per length class (\`scripts/bench-attention.sh\`: engine/ort's \`TestAttentionClasses\`, one child process per cell, one session on ${ATTN_THREADS:-1} thread, the faster of two runs and their peak RSS growth over the RSS before them; the attention share is the part of a third, profiled, run that ONNX Runtime's profiler puts in MultiHeadAttention and the nodes with four-axis outputs: head split, scores, softmax, context). Model \`$(basename "$model")\`; a padded batch holds rows of S - r·S/8 tokens."
echo
grep '^|' "$work/classes"
echo
echo "One text of $long_tokens tokens (the parity corpus's words), \`jetembed embed --sessions 1 --threads 1 --attention graph|fused\`, whole processes alternating for $rounds round(s), timed by \`/usr/bin/time\`:"
echo
echo "| Run | Load (1 min) at start | Wall s | CPU s (user + sys) | Peak RSS | |"
echo "|---|---|---|---|---|---|"
while read -r name wall user sys rss load ok; do
  echo "| $name | $load | $wall | $(python3 -c "print(round($user + $sys, 1))") ($user + $sys) | $((rss / 1024)) MiB | $ok |"
done <"$work/runs"
echo
python3 - "$work/runs" <<'PY'
import sys
best = {}
for l in open(sys.argv[1]):
    name, wall, user, sys_, rss, load, ok = l.split()
    if ok != "ok": continue
    b = best.setdefault(name, {"wall": 1e18, "cpu": 1e18, "rss": 0})
    b["wall"], b["cpu"], b["rss"] = min(b["wall"], float(wall)), min(b["cpu"], float(user) + float(sys_)), max(b["rss"], int(rss))
g, f = best.get("graph"), best.get("fused")
if not g or not f:
    print("No complete pair of runs: no ratio."); raise SystemExit
def verdict(ok): return "met" if ok else "**missed**"
print("| Measure (best of the rounds) | Result | Goal | |")
print("|---|---|---|---|")
print(f"| wall time, graph / fused | {g['wall']/f['wall']:.2f}x ({g['wall']:.1f} s / {f['wall']:.1f} s) | >= 2.5x | {verdict(g['wall']/f['wall'] >= 2.5)} |")
print(f"| CPU time, graph / fused | {g['cpu']/f['cpu']:.2f}x ({g['cpu']:.1f} s / {f['cpu']:.1f} s) | (the load-independent figure) | |")
print(f"| peak RSS, fused (graph) | {f['rss']/1024:.0f} MiB ({g['rss']/1024:.0f} MiB) | <= 800 MiB | {verdict(f['rss']/1024 <= 800)} |")
PY
