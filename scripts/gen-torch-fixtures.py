#!/usr/bin/python3
"""gen-torch-fixtures.py writes the torch-made test models of testdata/models
(see testdata/models/README.md) and the .pt files of internal/torchpt's
tests. Run it through scripts/gen-torch-fixtures.sh (make torch-fixtures).

The encoder is plain torch written after HF transformers'
modeling_xlm_roberta (eager attention): padding-offset position ids
(create_position_ids_from_input_ids), word + token type + position
embeddings, LayerNorm, query/key/value Linear, transpose_for_scores, q @ k^T
/ sqrt(head_dim) + the additive extended mask (1 - mask) * finfo.min,
softmax, @ v, dense + residual LayerNorm, GELU (erf) feed-forward. The BGE-M3
heads are FlagEmbedding's: sparse_linear Linear(H, 1), colbert_linear
Linear(H, H).

It writes, everything seeded:
  testdata/models/torch-m3/        a BAAI/bge-m3 Hugging Face snapshot:
      config.json, tokenizer.json, tokenizer_config.json,
      special_tokens_map.json, modules.json, 1_Pooling/config.json,
      config_sentence_transformers.json, sparse_linear.pt, colbert_linear.pt
      (torch.save of the heads' state dicts) and onnx/{model.onnx,
      model.onnx_data, model_fp16.onnx, model_fp16.onnx_data, config.json,
      tokenizer.json}: torch.onnx.export of the hidden-state graph (inputs
      input_ids, attention_mask; output last_hidden_state), weights in
      external data; model_fp16 holds the same weights as float16 with
      float32 inputs and outputs (Cast after each initializer).
  testdata/models/torch-m3-heads/  a three-head export of the same weights
      (dense_vecs, sparse_vecs, colbert_vecs, FlagEmbedding's BGEM3 forward)
      whose graph also takes token_type_ids and position_ids, as BERT-family
      exports do; model.onnx + model.onnx_data at the root.
  testdata/models/torch-m3-reference.json  the mixed multilingual corpus
      (texts of engine/tokenizer/testdata/parity, their HF tokenizers ids)
      and the float64 torch reference dense, sparse and ColBERT vectors,
      computed as BGEM3FlagModel.encode does.
  internal/torchpt/testdata/*.pt   torch.save variants for the Go reader.

Usage: scripts/gen-torch-fixtures.py [OUT]
  OUT (default: the repository root) receives testdata/models/... and
  internal/torchpt/testdata/...; the inputs are always the repository's.
Everything but legacy_f32.pt (whose pickle holds storage keys made from
object ids) comes out byte for byte the same on the same Debian packages.
"""
import collections, json, math, os, random, shutil, sys

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper, TensorProto
from torch import nn

SEED = 22
HIDDEN, LAYERS, HEADS, INTER = 32, 2, 4, 64
MAX_POS, TYPE_VOCAB, EPS = 8194, 1, 1e-5
PAD, BOS, EOS, UNK = 1, 0, 2, 3
OPSET = 17

root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
out = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else root
models = os.path.join(out, "testdata", "models")
tok_path = os.path.join(root, "testdata", "tokenizers", "xlmr-unigram.json")
parity = os.path.join(root, "engine", "tokenizer", "testdata", "parity")
VOCAB = len(json.load(open(tok_path, encoding="utf-8"))["model"]["vocab"])


# --- the encoder, after transformers' modeling_xlm_roberta ---------------

def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = torch.cumsum(mask, dim=1).type_as(mask) * mask
    return incremental_indices.long() + padding_idx


class Embeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN, padding_idx=PAD)
        self.token_type_embeddings = nn.Embedding(TYPE_VOCAB, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        if position_ids is None:
            position_ids = create_position_ids_from_input_ids(input_ids, PAD)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        e = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        e = e + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(e))


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = HEADS
        self.attention_head_size = HIDDEN // HEADS
        self.all_head_size = HIDDEN
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class SelfOutput(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.dense = nn.Linear(inner, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = SelfAttention()
        self.output = SelfOutput(HIDDEN)

    def forward(self, hidden_states, attention_mask):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class Intermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTER)

    def forward(self, x):
        return nn.functional.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.intermediate = Intermediate()
        self.output = SelfOutput(INTER)

    def forward(self, hidden_states, attention_mask):
        a = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(a), a)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([Layer() for _ in range(LAYERS)])

    def forward(self, h, mask):
        for layer in self.layer:
            h = layer(h, mask)
        return h


class XLMRobertaModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.encoder = Encoder()

    def forward(self, input_ids, attention_mask, token_type_ids=None, position_ids=None):
        dtype = self.embeddings.word_embeddings.weight.dtype
        extended = attention_mask[:, None, None, :].to(dtype)
        extended = (1.0 - extended) * torch.finfo(dtype).min
        h = self.embeddings(input_ids, token_type_ids, position_ids)
        return self.encoder(h, extended)


class Hidden(nn.Module):
    """The hidden-state export: what optimum's feature-extraction gives."""

    def __init__(self, enc):
        super().__init__()
        self.enc = enc

    def forward(self, input_ids, attention_mask):
        return self.enc(input_ids, attention_mask)


class ThreeHeads(nn.Module):
    """FlagEmbedding's BGEM3Model._encode (normalized, unified) in one graph."""

    def __init__(self, enc, sparse, colbert):
        super().__init__()
        self.enc, self.sparse_linear, self.colbert_linear = enc, sparse, colbert

    def forward(self, input_ids, attention_mask, token_type_ids, position_ids):
        h = self.enc(input_ids, attention_mask, token_type_ids, position_ids)
        dense = nn.functional.normalize(h[:, 0], dim=-1)
        sparse = torch.relu(self.sparse_linear(h))
        colbert = self.colbert_linear(h[:, 1:]) * attention_mask[:, 1:][:, :, None].to(h.dtype)
        colbert = nn.functional.normalize(colbert, dim=-1)
        return dense, sparse, colbert


def init_weights(m, g):
    """Random weights of a usable scale (HF's 0.02 init would leave every
    text nearly the same vector): the test must see attention and masks."""
    for name, p in m.named_parameters():
        with torch.no_grad():
            if name.endswith("LayerNorm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2 and "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    with torch.no_grad():
        m.embeddings.word_embeddings.weight[PAD].zero_()
        m.embeddings.position_embeddings.weight[PAD].zero_()


# --- corpus ---------------------------------------------------------------

def corpus():
    """A mixed multilingual corpus: texts of the tokenizer parity corpus
    (many scripts) with the ids HF tokenizers gave them, short and long."""
    texts = [json.loads(l)["text"] for l in open(os.path.join(parity, "corpus.jsonl"), encoding="utf-8")]
    ids = [json.loads(l)["ids"] for l in open(os.path.join(parity, "xlmr-unigram.default.expected.jsonl"), encoding="utf-8")]
    assert len(texts) == len(ids)
    rng = random.Random(SEED)
    pairs = [(t, i) for t, i in zip(texts, ids) if t.strip() and len(i) <= 512]
    long = rng.sample([p for p in pairs if 80 <= len(p[1]) <= 260 and len(set(p[1])) > 40], 3)
    short = rng.sample([p for p in pairs if len(p[1]) < 80], 28)
    chosen = short[:14] + long + short[14:]
    # One text with an unknown piece, if the corpus has one (<unk> is id 3).
    unk = [p for p in pairs if UNK in p[1] and p not in chosen][:1]
    return chosen + unk


# --- reference (float64, BGEM3FlagModel.encode semantics) -----------------

def reference(enc64, sparse64, colbert64, items):
    n = max(len(i) for _, i in items)
    ids = torch.full((len(items), n), PAD, dtype=torch.long)
    mask = torch.zeros((len(items), n), dtype=torch.long)
    for r, (_, i) in enumerate(items):
        ids[r, :len(i)] = torch.tensor(i)
        mask[r, :len(i)] = 1
    with torch.no_grad():
        h = enc64(ids, mask)
        # Padding must not change a text's vectors: check against one text alone.
        alone = enc64(ids[:1, :len(items[0][1])], mask[:1, :len(items[0][1])])
        d = (alone[0] - h[0, :len(items[0][1])]).abs().max().item()
        assert d < 1e-10, "padding changed the hidden states by %g" % d
        dense = nn.functional.normalize(h[:, 0], dim=-1)
        weights = torch.relu(sparse64(h))[..., 0]
        colbert = nn.functional.normalize(colbert64(h[:, 1:]) * mask[:, 1:][:, :, None].double(), dim=-1)
    out = []
    unused = {BOS, EOS, PAD, UNK}
    for r, (text, i) in enumerate(items):
        sp = {}
        for tid, w in zip(i, weights[r, :len(i)].tolist()):
            if tid not in unused and w > 0:
                sp[tid] = max(w, sp.get(tid, 0.0))
        keys = sorted(sp)
        out.append({
            "text": text, "ids": i,
            "dense": [float("%.10g" % v) for v in dense[r].tolist()],
            "sparse": {"ids": keys, "weights": [float("%.10g" % sp[k]) for k in keys]},
            "colbert": [[float("%.10g" % v) for v in row] for row in colbert[r, :len(i) - 1].tolist()],
        })
    return out


# --- files ----------------------------------------------------------------

def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_reference(path, obj):
    """JSON with one line per corpus item: diffable, and a tenth of the
    size of an indented dump."""
    items = obj.pop("items")
    head = json.dumps(obj, indent=2, ensure_ascii=False)[:-2]
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + ',\n  "items": [\n')
        f.write(",\n".join("    " + json.dumps(it, ensure_ascii=False, separators=(",", ":")) for it in items))
        f.write("\n  ]\n}\n")


def hf_config():
    return collections.OrderedDict([
        ("_name_or_path", "jetembed/torch-m3"), ("architectures", ["XLMRobertaModel"]),
        ("attention_probs_dropout_prob", 0.1), ("bos_token_id", BOS), ("classifier_dropout", None),
        ("eos_token_id", EOS), ("hidden_act", "gelu"), ("hidden_dropout_prob", 0.1),
        ("hidden_size", HIDDEN), ("initializer_range", 0.02), ("intermediate_size", INTER),
        ("layer_norm_eps", EPS), ("max_position_embeddings", MAX_POS), ("model_type", "xlm-roberta"),
        ("num_attention_heads", HEADS), ("num_hidden_layers", LAYERS), ("output_past", True),
        ("pad_token_id", PAD), ("position_embedding_type", "absolute"), ("torch_dtype", "float32"),
        ("transformers_version", "4.33.0"), ("type_vocab_size", TYPE_VOCAB), ("use_cache", True),
        ("vocab_size", VOCAB),
    ])


def export(module, args, names, outputs, dynamic, path):
    """torch.onnx.export, then the weights moved to model.onnx_data the way
    large exports (and BAAI/bge-m3's onnx/) keep them."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.onnx.export(module, args, tmp, input_names=names, output_names=outputs,
                      dynamic_axes=dynamic, opset_version=OPSET, do_constant_folding=True)
    m = onnx.load(tmp)
    os.remove(tmp)
    save_external(m, path)
    return m


def save_external(m, path):
    data = os.path.basename(path) + "_data"
    if os.path.exists(os.path.join(os.path.dirname(path), data)):
        os.remove(os.path.join(os.path.dirname(path), data))
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=0)
    onnx.checker.check_model(path)


def fp16_variant(src, dst):
    """model_fp16.onnx: float initializers stored as float16 and cast back,
    inputs and outputs float32 (onnxconverter's keep_io_types layout)."""
    m = onnx.load(src)
    g = m.graph
    casts = []
    for init in g.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        arr = numpy_helper.to_array(init).astype(np.float16)
        name = init.name
        init.CopyFrom(numpy_helper.from_array(arr, name + "_fp16"))
        casts.append(helper.make_node("Cast", [name + "_fp16"], [name], to=TensorProto.FLOAT, name="cast_" + name))
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    save_external(m, dst)


def torch_save_variants(dir, sparse, colbert):
    """The .pt shapes internal/torchpt must read: the zip format of
    torch >= 1.6 and the legacy one, f16/bf16/f64 storages, a state dict
    with _metadata, a Parameter, views with offsets and strides."""
    os.makedirs(dir, exist_ok=True)
    g = torch.Generator().manual_seed(SEED + 1)
    w = torch.randn(3, 4, generator=g)
    b = torch.randn(3, generator=g)
    base = collections.OrderedDict([("weight", w.clone()), ("bias", b.clone())])
    torch.save(base, os.path.join(dir, "zip_f32.pt"))
    # Protocol 4 adds FRAME, MEMOIZE, SHORT_BINUNICODE and STACK_GLOBAL.
    torch.save(base, os.path.join(dir, "zip_protocol4.pt"), pickle_protocol=4)
    torch.save(base, os.path.join(dir, "legacy_f32.pt"), _use_new_zipfile_serialization=False)
    torch.save(collections.OrderedDict([(k, v.half()) for k, v in base.items()]), os.path.join(dir, "zip_f16.pt"))
    torch.save(collections.OrderedDict([(k, v.bfloat16()) for k, v in base.items()]), os.path.join(dir, "zip_bf16.pt"))
    torch.save(collections.OrderedDict([(k, v.double()) for k, v in base.items()]), os.path.join(dir, "zip_f64.pt"))
    lin = nn.Linear(4, 3)
    with torch.no_grad():
        lin.weight.copy_(w)
        lin.bias.copy_(b)
    torch.save(lin.state_dict(), os.path.join(dir, "state_dict_metadata.pt"))
    torch.save({"weight": nn.Parameter(w.clone()), "bias": b.clone()}, os.path.join(dir, "parameter_dict.pt"))
    # Views sharing one storage: a transposed weight and a bias at an offset.
    big = torch.cat([w.t().contiguous().flatten(), b])
    torch.save({"weight": big[:12].view(4, 3).t(), "bias": big[12:]}, os.path.join(dir, "views.pt"))
    torch.save({"scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4)}, os.path.join(dir, "scalar_empty.pt"))
    write_json(os.path.join(dir, "expected.json"), {"weight": w.tolist(), "bias": b.tolist()})


def main():
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    enc = XLMRobertaModel().eval()
    init_weights(enc, g)
    sparse = nn.Linear(HIDDEN, 1)
    colbert = nn.Linear(HIDDEN, HIDDEN)
    for lin in (sparse, colbert):
        with torch.no_grad():
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) / math.sqrt(HIDDEN))
            lin.bias.copy_(0.1 * torch.randn(lin.bias.shape, generator=g))

    snap = os.path.join(models, "torch-m3")
    heads_dir = os.path.join(models, "torch-m3-heads")
    for d in (snap, heads_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    # The snapshot's root: what `huggingface-cli download BAAI/bge-m3` lays out.
    cfg = hf_config()
    write_json(os.path.join(snap, "config.json"), cfg)
    shutil.copyfile(tok_path, os.path.join(snap, "tokenizer.json"))
    special = collections.OrderedDict([
        ("bos_token", "<s>"), ("cls_token", "<s>"), ("eos_token", "</s>"), ("mask_token", "<mask>"),
        ("pad_token", "<pad>"), ("sep_token", "</s>"), ("unk_token", "<unk>")])
    write_json(os.path.join(snap, "special_tokens_map.json"), special)
    tc = collections.OrderedDict(special)
    tc.update([("clean_up_tokenization_spaces", True), ("model_max_length", MAX_POS - 2),
               ("sp_model_kwargs", {}), ("tokenizer_class", "XLMRobertaTokenizer")])
    write_json(os.path.join(snap, "tokenizer_config.json"), tc)
    write_json(os.path.join(snap, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    write_json(os.path.join(snap, "1_Pooling", "config.json"), collections.OrderedDict([
        ("word_embedding_dimension", HIDDEN), ("pooling_mode_cls_token", True),
        ("pooling_mode_mean_tokens", False), ("pooling_mode_max_tokens", False),
        ("pooling_mode_mean_sqrt_len_tokens", False)]))
    write_json(os.path.join(snap, "config_sentence_transformers.json"),
               {"__version__": {"sentence_transformers": "2.2.2", "transformers": "4.33.0", "pytorch": "2.1.2+cu121"}})
    # FlagEmbedding's BGEM3Model.save: state dicts of clones, as an OrderedDict.
    for name, lin in (("sparse_linear", sparse), ("colbert_linear", colbert)):
        sd = lin.state_dict()
        torch.save(type(sd)({k: v.clone().cpu() for k, v in sd.items()}), os.path.join(snap, name + ".pt"))

    ids = torch.tensor([[BOS, 782, 621, 456, 211, EOS, PAD, PAD], [BOS, 782, 5416, 841, 1529, 1282, 211, EOS]])
    mask = ids.ne(PAD).long()
    dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
           "attention_mask": {0: "batch_size", 1: "sequence_length"}}
    onnx_dir = os.path.join(snap, "onnx")
    export(Hidden(enc).eval(), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"],
           dict(dyn, last_hidden_state={0: "batch_size", 1: "sequence_length"}),
           os.path.join(onnx_dir, "model.onnx"))
    fp16_variant(os.path.join(onnx_dir, "model.onnx"), os.path.join(onnx_dir, "model_fp16.onnx"))
    write_json(os.path.join(onnx_dir, "config.json"), cfg)
    shutil.copyfile(tok_path, os.path.join(onnx_dir, "tokenizer.json"))

    # The three-head export: a BERT-family interface (token types, positions).
    write_json(os.path.join(heads_dir, "config.json"), cfg)
    shutil.copyfile(tok_path, os.path.join(heads_dir, "tokenizer.json"))
    tt = torch.zeros_like(ids)
    pos = create_position_ids_from_input_ids(ids, PAD)
    names = ["input_ids", "attention_mask", "token_type_ids", "position_ids"]
    hd = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    hd.update(dense_vecs={0: "batch_size"}, sparse_vecs={0: "batch_size", 1: "sequence_length"},
              colbert_vecs={0: "batch_size", 1: "colbert_length"})
    export(ThreeHeads(enc, sparse, colbert).eval(), (ids, mask, tt, pos), names,
           ["dense_vecs", "sparse_vecs", "colbert_vecs"], hd, os.path.join(heads_dir, "model.onnx"))

    # The reference, in float64.
    import copy
    enc64, sparse64, colbert64 = copy.deepcopy(enc).double().eval(), copy.deepcopy(sparse).double(), copy.deepcopy(colbert).double()
    items = corpus()
    write_reference(os.path.join(models, "torch-m3-reference.json"), collections.OrderedDict([
        ("about", "float64 torch reference of testdata/models/torch-m3 and torch-m3-heads "
                  "(scripts/gen-torch-fixtures.py): dense, sparse (max per id, specials and "
                  "weights <= 0 removed) and ColBERT (tokens after CLS) as BGEM3FlagModel.encode gives them"),
        ("tokenizer", "testdata/tokenizers/xlmr-unigram.json"),
        ("torch", torch.__version__), ("onnx", onnx.__version__), ("seed", SEED),
        ("items", reference(enc64, sparse64, colbert64, items)),
    ]))

    torch_save_variants(os.path.join(out, "internal", "torchpt", "testdata"), sparse, colbert)
    print("gen-torch-fixtures: wrote %s, %s, %s (%d texts)" % (snap, heads_dir, "torch-m3-reference.json", len(items)))


if __name__ == "__main__":
    main()
