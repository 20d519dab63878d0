#!/usr/bin/env python3
"""mixed-corpus.py writes the mixed multilingual corpus of BENCHMARKS.md's
whole-process comparison: texts from the tokenizer parity corpus (many
scripts), 60% short strings as they are and 40% paragraphs of 50-650 words
cut from it, seed 13. Usage: scripts/mixed-corpus.py N OUT_DIR; it writes
OUT_DIR/mixed.jsonl ({"text": ...} lines, for jetembed embed) and
OUT_DIR/mixed-strings.jsonl (JSON strings, for scripts/peer/oneshot.mjs)."""
import json, os, random, sys

n, out = int(sys.argv[1]), sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, "..", "engine", "tokenizer", "testdata", "parity", "corpus.jsonl")
random.seed(13)
lines = [t for t in (json.loads(l)["text"] for l in open(src, encoding="utf-8")) if t.strip()]
short = [t for t in lines if len(t.split()) <= 40]
words = [w for t in lines for w in t.split()]
texts = []
for _ in range(600):
    if random.random() < 0.6:
        texts.append(random.choice(short))
    else:
        k = random.randint(50, 650)
        at = random.randrange(0, len(words) - k)
        texts.append(" ".join(words[at:at + k]))
random.shuffle(texts)
texts = texts[:n]
with open(os.path.join(out, "mixed.jsonl"), "w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
with open(os.path.join(out, "mixed-strings.jsonl"), "w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps(t, ensure_ascii=False) + "\n")
