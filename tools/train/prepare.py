"""Step 1 of the pipeline: corpus -> tokenizer -> token arrays.

Writes into WORK: train.txt, eval.txt (corpus.py), tokenizer.json and
tokenizer_config.json (bpe.py), train.npy and eval.npy (int32 token ids).
"""

import argparse
import os
import sys

import numpy as np

import bpe
import corpus

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--merges", type=int, default=4064)
    ap.add_argument("--chat-template", default=os.path.join(HERE, "chat_template.jinja"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    corpus.main(a.work)
    train_text = open(f"{a.work}/train.txt", encoding="utf-8").read()
    eval_text = open(f"{a.work}/eval.txt", encoding="utf-8").read()
    vocab, merges = bpe.train(train_text, a.merges)
    if len(merges) != a.merges:
        sys.exit(f"bpe: only {len(merges)} merges possible, asked for {a.merges}")
    bpe.write(a.work, vocab, merges, open(a.chat_template, encoding="utf-8").read())
    enc = bpe.Encoder(vocab, merges)
    for name, text in (("train", train_text), ("eval", eval_text)):
        ids = np.array(enc.encode(text), dtype=np.int32)
        np.save(f"{a.work}/{name}.npy", ids)
        print(f"prepare: {name}: {len(text)} chars -> {len(ids)} tokens ({len(text) / len(ids):.2f} chars/token)")
    print(f"prepare: vocabulary {len(vocab)} regular + {len(bpe.SPECIAL_TOKENS)} special = "
          f"{len(vocab) + len(bpe.SPECIAL_TOKENS)} ids")


if __name__ == "__main__":
    main()
