#!/usr/bin/env python3
"""Make the tiny random-weight ColBERT fixture and its expected outputs.

Run from the repository root on a host with PyTorch, onnx and tokenizers (no PyLate, no network):

    python3 scripts/make-tiny-colbert.py --out "$OUT"

It reads the real answerai-colbert-small-v1 tokenizer and ColBERT config already committed under
test/fixtures/tiny-colbert/ and the real 384 -> 96 projection under test/fixtures/answerai-dense/,
and writes into --out:

  model.onnx                 a 2-layer BERT (hidden 32, 2 heads, seeded random weights) over the real
                             30,522-token vocabulary; inputs input_ids / attention_mask /
                             token_type_ids (int64, dynamic batch and sequence), output
                             last_hidden_state [B, L, 32]. The word embedding is factorized
                             (30,522 x 4 then 4 x 32) so the file stays small.
  config.json                the tiny model's shape
  1_Dense/config.json, 1_Dense/model.safetensors
                             the random 32 -> 16 projection (linear.weight, no bias), PyLate's layout
  expected.json              ColBERT outputs of PyTorch for ~24 texts: token ids, attention masks,
                             kept positions, embeddings after projection + skiplist + L2 norm
  expected-tokens.json.gz    token ids and masks of 1,000 varied strings as queries and documents
                             (the real tokenizer through the `tokenizers` package, plus ColBERT's
                             pre-processing)
  expected-dense.json        the real answerai projection applied to seeded random hidden states

The ColBERT rules below are written from PyLate's ColBERT.tokenize / ColBERT.encode and
sentence-transformers' Transformer.tokenize (read, not imported):
  * texts are str.strip()ped, then tokenized with truncation to (length - 1) tokens including
    [CLS] / [SEP]; queries are padded to (length - 1) with the MASK token (attention 0),
  * the prefix token id is inserted at position 1 (after [CLS]) with attention 1, so queries have
    exactly query_length tokens and documents at most document_length,
  * attend_to_expansion_tokens = true sets every query attention to 1,
  * documents keep the positions with attention 1 whose id is not a skiplist id (skiplist words
    mapped with convert_tokens_to_ids: unknown words map to the UNK id); queries keep every position,
  * token embeddings go through the Dense projection (no bias) and are L2-normalized
    (x / max(||x||, 1e-12), torch.nn.functional.normalize).
"""

import argparse
import gzip
import json
import math
import os
import random
import struct
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "test", "fixtures", "tiny-colbert")
REAL_DENSE = os.path.join(ROOT, "test", "fixtures", "answerai-dense")

SEED = 37
VOCAB = 30522
HIDDEN = 32
HEADS = 2
INTER = 64
LAYERS = 2
RANK = 4
MAX_POS = 512
OUT_DIM = 16


# ---------------------------------------------------------------- safetensors (no package needed)
def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    entry = header[name]
    assert entry["dtype"] == "F32", entry
    a, b = entry["data_offsets"]
    flat = torch.frombuffer(bytearray(raw[8 + n + a : 8 + n + b]), dtype=torch.float32)
    return flat.reshape(entry["shape"]).clone()


# ---------------------------------------------------------------- the model: BERT (post-LN, erf GELU)
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
        self.ln1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.up = nn.Linear(HIDDEN, INTER)
        self.down = nn.Linear(INTER, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x, bias):
        b, l, _ = x.shape
        d = HIDDEN // HEADS

        def heads(t):
            return t.view(b, l, HEADS, d).transpose(1, 2)

        att = torch.matmul(heads(self.q(x)), heads(self.k(x)).transpose(-1, -2)) / math.sqrt(d)
        att = torch.softmax(att + bias, dim=-1)
        ctx = torch.matmul(att, heads(self.v(x))).transpose(1, 2).reshape(b, l, HIDDEN)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))


class TinyBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, RANK)
        self.word_up = nn.Linear(RANK, HIDDEN, bias=False)
        self.pos = nn.Embedding(MAX_POS, HIDDEN)
        self.token_type = nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, input_ids, attention_mask, token_type_ids):
        length = input_ids.shape[1]
        x = self.word_up(self.word(input_ids)) + self.pos.weight[:length].unsqueeze(0) + self.token_type(token_type_ids)
        x = self.ln(x)
        # Masked keys get -1e9 before the softmax: exp underflows to exactly 0.
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * -1e9
        for layer in self.layers:
            x = layer(x, bias)
        return x


def init_weights(model):
    # Larger than BERT's 0.02 so attention is far from uniform: a wrong mask changes the outputs.
    g = torch.Generator().manual_seed(SEED)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("ln.weight") or ".ln1.weight" in name or ".ln2.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name in ("word.weight", "pos.weight", "token_type.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


# ---------------------------------------------------------------- ColBERT rules over `tokenizers`
class Rules:
    def __init__(self, fixture):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(os.path.join(fixture, "tokenizer.json"))
        with open(os.path.join(fixture, "config_sentence_transformers.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(fixture, "tokenizer_config.json")) as f:
            tcfg = json.load(f)
        self.query_length = cfg["query_length"]
        self.document_length = cfg["document_length"]
        self.attend = bool(cfg.get("attend_to_expansion_tokens", False))
        self.query_prefix_id = self.token_id(cfg["query_prefix"])
        self.document_prefix_id = self.token_id(cfg["document_prefix"])
        mask = tcfg["mask_token"]
        self.mask_token = mask if isinstance(mask, str) else mask["content"]
        self.mask_id = self.tok.token_to_id(self.mask_token)
        self.skip_ids = sorted({self.token_id(w) for w in cfg["skiplist_words"]})

    def token_id(self, token):
        # transformers' convert_tokens_to_ids: unknown tokens map to the UNK id
        i = self.tok.token_to_id(token)
        return i if i is not None else self.tok.token_to_id("[UNK]")

    def tokenize(self, texts, is_query):
        length = self.query_length if is_query else self.document_length
        self.tok.no_padding()
        self.tok.no_truncation()
        self.tok.enable_truncation(max_length=length - 1)
        if is_query:
            self.tok.enable_padding(pad_id=self.mask_id, pad_token=self.mask_token, length=length - 1)
        encs = self.tok.encode_batch([str(t).strip() for t in texts])
        prefix = self.query_prefix_id if is_query else self.document_prefix_id
        ids = [e.ids[:1] + [prefix] + e.ids[1:] for e in encs]
        mask = [e.attention_mask[:1] + [1] + e.attention_mask[1:] for e in encs]
        if is_query and self.attend:
            mask = [[1] * len(m) for m in mask]
        return ids, mask


def encode(model, weight, rules, texts, is_query):
    ids, mask = rules.tokenize(texts, is_query)
    longest = max(len(i) for i in ids)
    pad_ids = [i + [rules.mask_id] * (longest - len(i)) for i in ids]
    pad_mask = [m + [0] * (longest - len(m)) for m in mask]
    with torch.no_grad():
        hidden = model(
            torch.tensor(pad_ids, dtype=torch.int64),
            torch.tensor(pad_mask, dtype=torch.int64),
            torch.zeros(len(ids), longest, dtype=torch.int64),
        )
        projected = hidden @ weight.T
    items = []
    for row in range(len(texts)):
        if is_query:
            keep = list(range(len(ids[row])))
        else:
            keep = [j for j in range(len(ids[row])) if mask[row][j] == 1 and ids[row][j] not in rules.skip_ids]
        emb = nn.functional.normalize(projected[row, keep], p=2, dim=1)
        items.append(
            {
                "text": texts[row],
                "ids": ids[row],
                "attention_mask": mask[row],
                "kept": keep,
                "embeddings": [round(float(v), 8) for v in emb.flatten()],
            }
        )
    return items


# ---------------------------------------------------------------- 1,000 varied strings
WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which this be or had "
    "paris city river seine museum louvre tower eiffel arrondissement bridge garden street market "
    "history king revolution church notre dame art painting science music library university student "
    "quantum retrieval late interaction colbert token embedding vector search index query document "
    "running jumped happily unbelievable internationalization electroencephalography antidisestablishment "
    "covid-19 e-mail state-of-the-art don't can't it's o'clock rock'n'roll naïve café résumé façade "
    "zürich münchen größe straße kraków łódź são paulo españa niño coração ångström smörgåsbord"
).split()
UNICODE = [
    "Ελληνικά γράμματα", "русский текст здесь", "中文字符测试", "日本語のテキストです", "한국어 문장",
    "العربية نص", "עברית", "हिन्दी पाठ", "ไทย ภาษา", "Tiếng Việt có dấu", "emoji 😀🎉👍🏽 and 🇫🇷",
    "e\u0301 combining acute", "zero\u200bwidth\u200cjoiner\u200d", "nbsp\u00a0between", "ideographic\u3000space",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ", "ligature ﬁ ﬂ", "İstanbul ıi", "ǅ titlecase", "∑∫√∞ ≤ ≥ ≠", "€£¥₹ 100",
    "control\x00\x07\x1b chars", "tab\tand\nnewline\r\n", "\u2028line sep\u2029", "soft\u00adhyphen",
    "mixed中文and English", "ÀÉÎÕÜ àéîõü", "ᴀʙᴄ small caps", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "\ufeffBOM start",
]
SPECIAL = ["[MASK]", "[CLS] hello [SEP]", "[unused0] query", "[unused1]", "[UNK] x", "[PAD]", "[mask]", "[Q] [D]"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "?!", "--", "«»", "“quotes”", "‘single’", "—", "…", "¿¡"]


def varied_strings(n=1000):
    rng = random.Random(SEED)
    out = ["", " ", "   \t\n ", ".", "!!!", "a", "A", "[MASK]", "x" * 150, "word " * 400]
    while len(out) < n:
        kind = rng.random()
        if kind < 0.08:
            out.append(rng.choice(SPECIAL) + " " + " ".join(rng.choices(WORDS, k=rng.randint(0, 5))))
        elif kind < 0.25:
            out.append(rng.choice(UNICODE) + " " + " ".join(rng.choices(WORDS, k=rng.randint(0, 6))))
        elif kind < 0.4:
            parts = [rng.choice(WORDS) + rng.choice(PUNCT) for _ in range(rng.randint(1, 12))]
            out.append((" " if rng.random() < 0.5 else "").join(parts))
        elif kind < 0.47:
            # long documents: past document_length, so truncation is exercised
            out.append(" ".join(rng.choices(WORDS + PUNCT, k=rng.randint(250, 600))))
        elif kind < 0.52:
            out.append("".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=rng.randint(90, 130))))
        elif kind < 0.57:
            out.append(" " * rng.randint(0, 3) + " ".join(rng.choices(WORDS, k=rng.randint(1, 4))) + "\n" * rng.randint(0, 2))
        elif kind < 0.62:
            out.append(f"https://example.org/p?id={rng.randint(0, 99999)}&q={rng.choice(WORDS)} user{rng.randint(0, 99)}@mail.com")
        elif kind < 0.66:
            out.append(f"{rng.uniform(-1e6, 1e6):.3f} {rng.randint(0, 10**12)} 3.14e-10 1,000,000 50%")
        else:
            words = rng.choices(WORDS, k=rng.randint(1, 45))
            if rng.random() < 0.3:
                words = [w.upper() if rng.random() < 0.5 else w.capitalize() for w in words]
            out.append(" ".join(words))
    return out[:n]


# ---------------------------------------------------------------- main
def export_onnx(model, path):
    ids = torch.tensor([[101, 1, 2023, 2003, 102], [101, 1, 7592, 102, 103]], dtype=torch.int64)
    args = (ids, torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]), torch.zeros_like(ids))
    kwargs = dict(
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        dynamic_axes={n: {0: "batch", 1: "sequence"} for n in ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]},
        opset_version=17,
        do_constant_folding=True,
    )
    try:
        torch.onnx.export(model, args, path, dynamo=False, **kwargs)
    except TypeError:  # torch without the dynamo argument
        torch.onnx.export(model, args, path, **kwargs)
    import onnx

    onnx.checker.check_model(onnx.load(path))
    try:  # optional cross-check where onnxruntime is installed
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, {n: a.numpy() for n, a in zip(kwargs["input_names"], args)})[0]
        with torch.no_grad():
            want = model(*args).numpy()
        print(f"onnxruntime vs torch max |diff| = {abs(got - want).max():.3g}")
    except ImportError:
        print("onnxruntime not installed: skipped the ONNX cross-check")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=FIXTURE, help="output folder (default: the fixture folder)")
    ap.add_argument("--skip-tokens", action="store_true", help="only the model (no `tokenizers` needed)")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")
    os.makedirs(os.path.join(a.out, "1_Dense"), exist_ok=True)
    torch.manual_seed(SEED)
    model = TinyBert().eval()
    init_weights(model)
    weight = torch.randn(OUT_DIM, HIDDEN, generator=torch.Generator().manual_seed(SEED + 1)) / math.sqrt(HIDDEN)

    export_onnx(model, os.path.join(a.out, "model.onnx"))
    write_safetensors(os.path.join(a.out, "1_Dense", "model.safetensors"), {"linear.weight": weight})
    with open(os.path.join(a.out, "1_Dense", "config.json"), "w") as f:
        json.dump({"in_features": HIDDEN, "out_features": OUT_DIM, "bias": False, "activation_function": "torch.nn.modules.linear.Identity"}, f)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        config = dict(model_type="bert", architectures=["TinyBert"], hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      intermediate_size=INTER, vocab_size=VOCAB, word_embedding_rank=RANK, max_position_embeddings=MAX_POS, seed=SEED)
        json.dump(config, f, indent=2)

    # The real projection on seeded random hidden states (parity of the 384 -> 96 layer)
    real = read_safetensors(os.path.join(REAL_DENSE, "model.safetensors"), "linear.weight")
    hidden = torch.randn(12, real.shape[1], generator=torch.Generator().manual_seed(SEED + 2))
    dense = {
        "hidden": [round(float(v), 8) for v in hidden.flatten()],
        "tokens": hidden.shape[0],
        "expected": [round(float(v), 8) for v in nn.functional.normalize(hidden @ real.T, p=2, dim=1).flatten()],
    }
    with open(os.path.join(a.out, "expected-dense.json"), "w") as f:
        json.dump(dense, f)
    if a.skip_tokens:
        return

    import tokenizers

    rules = Rules(FIXTURE)
    queries = ["what is late interaction?", "Who built the Eiffel Tower", "", "paris", "[MASK] tokens, expanded!",
               "a very long query " + "word " * 40, "Ελληνικά και 中文", "punctuation: ! ? . , ; -- ...", "x", "   padded   ",
               "COVID-19 vaccines", "rock'n'roll"]
    documents = ["Late interaction scores every query token against every document token.", "The Eiffel Tower is in Paris, France.",
                 "", "!!!", ". , ; : ? !", "Museum of the Louvre (Paris) -- art & history.",
                 " ".join(random.Random(SEED).choices(WORDS + PUNCT, k=420)), "naïve café résumé, straße",
                 "a", "[unused1] prefix text", "emoji 😀 and 中文 mixed", "tab\tseparated\nlines"]
    expected = {
        "meta": {"seed": SEED, "torch": torch.__version__, "tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
                 "query_length": rules.query_length, "document_length": rules.document_length, "skip_ids": rules.skip_ids},
        "queries": encode(model, weight, rules, queries, True),
        "documents": encode(model, weight, rules, documents, False),
    }
    with open(os.path.join(a.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)

    strings = varied_strings()
    q_ids, q_mask = rules.tokenize(strings, True)
    d_ids, _ = rules.tokenize(strings, False)
    tokens = {"tokenizers": tokenizers.__version__, "strings": strings, "query_ids": q_ids, "query_mask": q_mask, "document_ids": d_ids}
    with gzip.open(os.path.join(a.out, "expected-tokens.json.gz"), "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(tokens, f, ensure_ascii=False, separators=(",", ":"))
    for name in sorted(os.listdir(a.out)):
        p = os.path.join(a.out, name)
        if os.path.isfile(p):
            print(f"{name}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
