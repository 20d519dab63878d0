#!/usr/bin/env bash
# gen-tokenizer-testdata.sh regenerates the tokenizer parity test data:
#   testdata/tokenizers/xlmr-unigram*.json         small XLM-R layout tokenizers
#   engine/tokenizer/testdata/parity/corpus.jsonl  the hard multilingual corpus
#   engine/tokenizer/testdata/parity/<name>.<mode>.expected.jsonl
# Everything is seeded, so a rerun on the same Debian packages gives the same
# files. Needs: python3, spm_train (apt-get install sentencepiece), node and
# the HF oracle ($JETEMBED_HF_ORACLE, default .deps/hf-oracle).
#
# Usage: scripts/gen-tokenizer-testdata.sh [--expected-only]
#   --expected-only  keep the tokenizer files, rebuild corpus and expectations
#                    for every testdata/tokenizers/*.json (also WordPiece ones).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ORACLE=${JETEMBED_HF_ORACLE:-$ROOT/.deps/hf-oracle}
PARITY=$ROOT/engine/tokenizer/testdata/parity
TOKS=$ROOT/testdata/tokenizers
CONVERT=${SPM2HF:-/work/shared/tools/spm2hf/convert.py}
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$PARITY" "$TOKS"

only_expected=false
[[ ${1:-} == --expected-only ]] && only_expected=true

# 1. Corpora from the translated message catalogs: train.txt for spm_train
#    (one sentence a line) and corpus.jsonl for parity (a few hundred KB).
cat >"$WORK/corpus.py" <<'PYEOF'
import gettext, glob, json, os, random, sys

locale_dir, train_path, corpus_path = sys.argv[1:4]
rng = random.Random(20261129)

# Every msgstr of every catalog, grouped by language (the directory name).
by_lang = {}
for mo in sorted(glob.glob(os.path.join(locale_dir, "*", "LC_MESSAGES", "*.mo"))):
    lang = mo[len(locale_dir):].strip("/").split("/")[0]
    try:
        with open(mo, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog
    except Exception:
        continue
    seen = by_lang.setdefault(lang, {})
    for key in sorted(cat, key=repr):
        v = cat[key]
        if key == "" or not isinstance(v, str) or not v.strip():
            continue
        seen[v] = None
langs = sorted(by_lang)

# Training text: up to 3000 strings a language, one line each (spm_train
# splits on newlines), in a fixed shuffled order.
train = []
for lang in langs:
    msgs = list(by_lang[lang])
    rng.shuffle(msgs)
    train.extend(m.replace("\r", " ").replace("\n", " ") for m in msgs[:3000])
rng.shuffle(train)
with open(train_path, "w", encoding="utf-8") as f:
    for line in train:
        f.write(line + "\n")

# Parity corpus: a few raw strings per language (newlines, tabs, markup and
# all), the synthetic hard cases, and long documents past 8k tokens.
texts = []
for lang in langs:
    msgs = list(by_lang[lang])
    rng.shuffle(msgs)
    short = [m for m in msgs if len(m) < 400]
    texts.extend(short[:6])
    longer = [m for m in msgs if len(m) >= 120]
    texts.extend(longer[:1])

scripts = ["Hello world", "Привет мир", "Γειά σου κόσμε", "שלום עולם", "مرحبا بالعالم",
           "नमस्ते दुनिया", "হ্যালো বিশ্ব", "สวัสดีชาวโลก", "ສະບາຍດີ", "မင်္ဂလာပါ", "សួស្តី",
           "안녕하세요 세계", "こんにちは世界", "你好，世界", "ሰላም ዓለም", "Բարեւ աշխարհ",
           "გამარჯობა", "ᏣᎳᎩ", "ᓄᓇᕗᑦ", "ᚠᚢᚦᚨᚱᚲ", "𐌰𐌱𐌲", "ꦲꦏ꧀ꦱꦫ", "ߒߞߏ", "ⵜⴰⵎⴰⵣⵉⵖⵜ"]
emoji = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇩🇪", "❤️", "1️⃣", "🧑🏿‍🚀", "👩‍❤️‍💋‍👨", "🫠"]
combining = ["e\u0301", "a\u0300\u0316", "n\u0303", "\u1100\u1161\u11a8", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034d",
             "\u0915\u094d\u0937", "\u0e01\u0e33", "o\u0308\u0304", "\u212b", "\u0041\u030a"]
spaces = ["\u00a0", "\u3000", "\u2028", "\u2029", "\u2009", "\u200b", "\u200d", "\u00ad",
          "\ufeff", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "  ", "   ", "      "]
controls = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x9f", "\ue000", "\U0010fffd", "\ufffd", "\ufffe"]
specials = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "<S>", "< s >", "<s", "s>", "<<s>>", "</s></s>"]
fullwidth = ["ＡＢＣ ａｂｃ １２３", "ｶﾀｶﾅ", "㍻ ㌔ ㈱ ™ ℡ ½ ² ﬁ ﬃ", "Ⅻ ⅷ ① ⑽ ⒜", "ｈｔｔｐｓ：／／ｅｘａｍｐｌｅ．ｃｏｍ"]
synthetic = ["", " ", "  ", "\t", "\n", "\r\n", " \t\n ", "\u3000", "\u00a0\u00a0", "\u2028", "\x00",
             "a", "▁", "▁▁", " ▁ ", "_", "<s>", "</s>", "<mask>", "<pad>", "<unk>"]
synthetic += scripts + emoji + combining + fullwidth + specials
synthetic += ["".join(scripts), " ".join(emoji), "".join(emoji), "".join(combining), " ".join(combining)]
for sp in spaces:
    synthetic += ["a" + sp + "b", sp + "word" + sp, "x" + sp * 3 + "y" + sp]
for c in controls:
    synthetic += ["a" + c + "b", c + "start", "end" + c, c * 3]
for sp_tok in specials[:5]:
    synthetic += [f"Hello {sp_tok} world", f"Hello{sp_tok}world", f"  {sp_tok}  x", f"{sp_tok}{sp_tok}",
                  f"\t{sp_tok}\n", f"a {sp_tok}", f"{sp_tok} a", f"é{sp_tok}ü"]
synthetic += ["Dies ist ein <mask> Satz.", "The capital of France is <mask>.", "<s> hello </s> <pad>",
              "x" * 500, "ab" * 700, "é" * 300, "日本語" * 200, "👍" * 100, "-" * 300, "1234567890" * 50,
              "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
              "pneumonoultramicroscopicsilicovolcanoconiosis" * 5, "a" + " " * 1000 + "b", " " * 50,
              "\n" * 20, "\r\n" * 10 + "x", "line1\r\nline2\r\n\r\nline3", "tab\tseparated\tvalues\t1\t2",
              "Mixed: English, Русский, 中文, العربية, हिन्दी, 日本語, 한국어, ไทย 👨‍👩‍👧",
              "C'est l'été — «guillemets» “quotes” ‘single’ …", "math: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ ∂ ∇",
              "code: if (x != nil) { return fmt.Errorf(\"%w\", err) }", "url https://例え.jp/パス?q=1&r=2#frag",
              "email: someone@example.com", "ＡＢＣ　ＤＥＦ", "\u0130stanbul \u0131 I i", "ß ẞ ǅ ǈ ǋ",
              "\ud7a3\u3131\u314f", "ﷺ ﷽", "\u0644\u0627 \ufefb", "ᄀᄀᄀ각ᆨᆨ", "\U0001d400\U0001d7d8 \U0001f600",
              "Ǆ ǅ ǆ ﬀ ﬅ ẛ̣", "¼ ¾ ⁰ ⁹ ₀ ₉", "Ⓐ ⓩ 🄰 🅰", "\u2060\u2061\u2062", "\u180e mongolian vowel separator",
              "a\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301b", "\u0915\u093f\u0915\u0940\u0915\u0941 \u0bb8\u0bcd\u0bb0\u0bc0",
              "\U0001F469\U0001F3FD\u200D\U0001F52C and \U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"]
rnd_alphabet = ("abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,;:!?'\"-()[]{}<>/\\ éüñçøåß"
                "абвгдеж αβγδ אבג ابت अआइ あいう アイウ 漢字中文 한국어 ไทย \u3000\u00a0\t\n\r"
                "\u0301\u0308\u200d\u2028\x00\x1f👍🏽❤️▁")
for i in range(150):
    n = rng.choice([1, 2, 3, 5, 8, 13, 40, 120])
    synthetic.append("".join(rng.choice(rnd_alphabet) for _ in range(n)))
texts.extend(synthetic)

# Long documents: several thousand words each, past 8k tokens at vocab 8000.
for picks in (["ru", "uk", "bg"], ["ja", "zh_CN", "ko"], ["de", "fr", "ar", "hi", "th", "el"]):
    parts = []
    for lang in picks:
        msgs = sorted(by_lang.get(lang, {}))
        rng.shuffle(msgs)
        parts.extend(msgs[:900])
    doc = ""
    while len(doc) < 36000 and parts:
        doc += parts.pop() + rng.choice([" ", "\n", ". ", "\n\n", "  "])
    texts.append(doc)

with open(corpus_path, "w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
print(f"corpus: {len(texts)} texts, {sum(len(t.encode()) for t in texts)} bytes; train: {len(train)} lines", file=sys.stderr)
PYEOF
"$PY" "$WORK/corpus.py" /usr/share/locale "$WORK/train.txt" "$PARITY/corpus.jsonl"

# 2. A SentencePiece unigram model (nmt_nfkc, 8000 pieces) converted to the
#    XLM-RoBERTa tokenizer.json layout, in the current and the legacy
#    Metaspace form; the legacy file also carries a truncation section.
if ! $only_expected; then
	command -v spm_train >/dev/null || { echo "spm_train missing: apt-get install -y sentencepiece" >&2; exit 1; }
	spm_train --input="$WORK/train.txt" --model_prefix="$WORK/spm" \
		--model_type=unigram --normalization_rule_name=nmt_nfkc \
		--vocab_size=8000 --character_coverage=0.9995 \
		--random_seed=42 --num_threads=1 --shuffle_input_sentence=false \
		--input_sentence_size=0 --max_sentence_length=8192 \
		--minloglevel=1 >"$WORK/spm.log" 2>&1 || { tail -20 "$WORK/spm.log" >&2; exit 1; }
	"$PY" "$CONVERT" "$WORK/spm.model" "$TOKS/xlmr-unigram.json"
	"$PY" "$CONVERT" "$WORK/spm.model" "$WORK/legacy.json" --legacy-metaspace
	"$PY" - "$WORK/legacy.json" "$TOKS/xlmr-unigram-legacy.json" <<'PYEOF'
import json, sys
tok = json.load(open(sys.argv[1], encoding="utf-8"))
tok["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False, indent=2)
PYEOF
fi

# 3. Expected ids from HuggingFace tokenizers, three modes per tokenizer:
#    default (special tokens, the file's truncation), nospecial, max64.
strip_ids() { "$PY" -c '
import json, sys
for line in sys.stdin:
    print(json.dumps({"ids": json.loads(line)["ids"]}, separators=(",", ":")))'; }
for tok in "$TOKS"/*.json; do
	name=$(basename "$tok" .json)
	node "$ORACLE/encode.js" "$tok" "$PARITY/corpus.jsonl" - | strip_ids >"$PARITY/$name.default.expected.jsonl"
	node "$ORACLE/encode.js" "$tok" "$PARITY/corpus.jsonl" - --no-special | strip_ids >"$PARITY/$name.nospecial.expected.jsonl"
	node "$ORACLE/encode.js" "$tok" "$PARITY/corpus.jsonl" - --max-length 64 | strip_ids >"$PARITY/$name.max64.expected.jsonl"
	echo "$name: $(wc -l <"$PARITY/$name.default.expected.jsonl") expected lines"
done
