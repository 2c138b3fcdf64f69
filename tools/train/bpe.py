"""Byte-level BPE: train merges on a corpus, write tokenizer.json, encode.

The tokenizer is Qwen3.5's in everything but its merges (spec §8.1): NFC,
the Qwen3.5 pre-tokenizer regex (letter runs include combining marks),
GPT-2's byte -> unicode map, no prefix space, and the Qwen special tokens
after the regular ids, in Qwen's order. The files are the standard HF
`tokenizer.json` / `tokenizer_config.json`, which the C tokenizer loads
unchanged.

Training is the classic algorithm: count the pre-tokenized pieces, then
repeatedly merge the most frequent adjacent pair (ties: the larger pair in
string order, so the result does not depend on hash order), updating only
the pieces that contain it.
"""

import json
import unicodedata
from collections import Counter, defaultdict

import regex

QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# (content, special) in Qwen's order; the ids follow the regular vocabulary.
SPECIAL_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable chars."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHAR = bytes_to_unicode()
SPLIT = regex.compile(QWEN35_SPLIT)


def pieces(text):
    """NFC, split, and map each piece's UTF-8 bytes to byte chars."""
    text = unicodedata.normalize("NFC", text)
    return ["".join(BYTE_CHAR[b] for b in p.encode("utf-8")) for p in SPLIT.findall(text)]


def train(text, n_merges):
    """Returns (vocab: {token: id}, merges: [(a, b), ...])."""
    counts = Counter(pieces(text))
    words = [list(p) for p in counts]
    freq = list(counts.values())
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_count[p] += freq[i]
            where[p].add(i)
    vocab = {c: i for i, c in enumerate(BYTE_CHAR.values())}
    merges = []
    while len(merges) < n_merges and pair_count:
        (a, b), n = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))
        if n < 2:
            break
        merges.append((a, b))
        new = a + b
        vocab.setdefault(new, len(vocab))
        for i in where.pop((a, b)):
            w, f = words[i], freq[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                where[p].add(i)
        for p in [p for p, c in pair_count.items() if c <= 0]:
            del pair_count[p]
            where.pop(p, None)
    return vocab, merges


class Encoder:
    """Encodes text with trained merges (no special-token parsing: the
    training text has none)."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.rank = {m: r for r, m in enumerate(merges)}
        self.cache = {}

    def _piece(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        w = list(piece)
        while len(w) > 1:
            best = min(range(len(w) - 1), key=lambda j: self.rank.get((w[j], w[j + 1]), 1 << 30))
            r = self.rank.get((w[best], w[best + 1]))
            if r is None:
                break
            a, b = w[best], w[best + 1]
            out, j = [], 0
            while j < len(w):       # merge every occurrence, left to right
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        ids = [self.vocab[t] for t in w]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        return [i for p in pieces(text) for i in self._piece(p)]


def special_ids(vocab):
    return {content: len(vocab) + k for k, (content, _) in enumerate(SPECIAL_TOKENS)}


def write(outdir, vocab, merges, chat_template):
    """tokenizer.json and tokenizer_config.json in the Qwen layout."""
    added = [{"id": len(vocab) + k, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": s} for k, (c, s) in enumerate(SPECIAL_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_SPLIT}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]},
    }
    with open(f"{outdir}/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")} for a in added},
        "additional_special_tokens": [c for c, s in SPECIAL_TOKENS if s and c != "<|endoftext|>"],
        "bos_token": None, "chat_template": chat_template, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(f"{outdir}/tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
