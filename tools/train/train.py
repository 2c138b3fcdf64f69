"""Step 2: train the target and its MTP head jointly.

Each step takes B random windows of T + 2 tokens x_0 .. x_{T+1} from the
training stream and minimises
    L = CE(target at p -> x_{p+1})
      + w1 CE(MTP(x_{p+1}, H_p) -> x_{p+2})                 spec §5.3
      + w2 CE(MTP(x_{p+2}, m_p, position p+1) -> x_{p+3})   spec §5.4
The second term trains the head the way it drafts the first token; the third
the way it drafts the second (fed its own hidden m_p, attending to the
step-1 rows before it), with the true token standing in for the first draft.
Gradients of the MTP terms flow into the target too (joint training).

Writes WORK/model.pt (state_dict + config) and WORK/curves.json.
"""

import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from qwen35 import Config, Qwen35, count_parameters


def losses(model, x):
    """(target, mtp step 1, mtp step 2) mean cross-entropies on windows x [B, T+2]."""
    T = x.shape[1] - 2
    V = model.config.vocab_size
    ce = lambda h, y: F.cross_entropy(model.logits(h).reshape(-1, V), y.reshape(-1))
    h = model.hidden(x[:, :T])
    m1, kv1 = model.mtp_teacher_forced(h, x[:, 1:T + 1])
    m2 = model.mtp_second_step(m1[:, :T - 1], (kv1[0][:, :T - 1], kv1[1][:, :T - 1]), x[:, 2:T + 1])
    return ce(h, x[:, 1:T + 1]), ce(m1, x[:, 2:T + 2]), ce(m2, x[:, 3:T + 2])


def windows(stream, starts, T):
    return torch.from_numpy(np.stack([stream[s:s + T + 2] for s in starts]).astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=420)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--w1", type=float, default=0.5)
    ap.add_argument("--w2", type=float, default=0.3)
    ap.add_argument("--eval-every", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=768)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.RandomState(a.seed)
    train = np.load(f"{a.work}/train.npy")
    held = np.load(f"{a.work}/eval.npy")
    tok = json.load(open(f"{a.work}/tokenizer.json", encoding="utf-8"))
    vocab = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    cfg = Config(vocab_size=vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                 intermediate_size=a.intermediate)
    model = Qwen35(cfg)
    # small init keeps the residual stream tame at the start (GPT-2 style)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02)
    print(f"train: {count_parameters(model) / 1e6:.2f} M parameters, layers {cfg.layer_types()}")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    # fixed held-out windows: every eval sees the same tokens
    eval_starts = np.linspace(0, len(held) - a.seq - 3, 24).astype(np.int64)
    eval_x = windows(held, eval_starts, a.seq)

    def evaluate():
        model.eval()
        with torch.no_grad():
            parts = [losses(model, eval_x[i:i + 8]) for i in range(0, len(eval_x), 8)]
        model.train()
        return [float(np.mean([p[k].item() for p in parts])) for k in range(3)]

    curves = {"step": [], "train": [], "train_mtp1": [], "train_mtp2": [],
              "eval_step": [], "eval": [], "eval_mtp1": [], "eval_mtp2": []}
    t0 = time.time()
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = windows(train, rng.randint(0, len(train) - a.seq - 2, size=a.batch), a.seq)
        l0, l1, l2 = losses(model, x)
        loss = l0 + a.w1 * l1 + a.w2 * l2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for k, v in zip(("train", "train_mtp1", "train_mtp2"), (l0, l1, l2)):
            curves[k].append(v.item())
        curves["step"].append(step)
        if step % 10 == 0:
            print(f"step {step:4d}  loss {l0.item():.3f}  mtp1 {l1.item():.3f}  mtp2 {l2.item():.3f}  "
                  f"lr {lr:.2e}  {time.time() - t0:.0f}s", flush=True)
        if step % a.eval_every == 0 or step == a.steps:
            e = evaluate()
            for k, v in zip(("eval", "eval_mtp1", "eval_mtp2"), e):
                curves[k].append(v)
            curves["eval_step"].append(step)
            print(f"eval {step:4d}  loss {e[0]:.3f} (ppl {math.exp(e[0]):.1f})  mtp1 {e[1]:.3f}  mtp2 {e[2]:.3f}",
                  flush=True)
    curves["seconds"] = time.time() - t0
    curves["args"] = vars(a)
    torch.save({"config": cfg.to_dict(), "state_dict": model.state_dict()}, f"{a.work}/model.pt")
    with open(f"{a.work}/curves.json", "w") as f:
        json.dump(curves, f)
    print(f"train: done in {curves['seconds']:.0f}s; held-out loss {curves['eval'][-1]:.3f} "
          f"(perplexity {math.exp(curves['eval'][-1]):.2f})")


if __name__ == "__main__":
    main()
