"""MTP acceptance as the training-side forward sees it (the C engine's
tests and bench/mtp-default.sh measure the same things and compare).

teacher_forced: on a held-out run x_0..x_{T-1}, the fraction of positions p
  where the first draft argmax MTP(x_{p+1}, H_p) equals the target's argmax
  at p + 1 -- the greedy first-draft acceptance with held-out text as the
  committed context.
speculative: greedy speculative decoding simulated round by round, exactly
  as nx_spec runs it (spec §6): the pending token and K drafts (the first from
  the target's hidden, later ones from the head's own hidden, attending to
  the committed rows plus the provisional ones), one verify, the longest
  agreeing prefix plus the bonus token; k = min(K, budget left - 1). Per
  position i: hits[i] / tried[i], drafts at depth i checked / accepted.
The target is recomputed from scratch each round, which is slow but plainly
equal to an incremental decoder.
"""

import numpy as np
import torch

TF_OFFSET, TF_TOKENS = 8000, 1024
SPEC_OFFSETS = [3000, 9000, 15000, 21000, 27000, 33000, 39000, 45000]
SPEC_PROMPT, SPEC_GEN = 32, 96


def argmax(v):
    return int(torch.argmax(v))


def teacher_forced(model, held):
    x = torch.from_numpy(held[TF_OFFSET:TF_OFFSET + TF_TOKENS].astype(np.int64))[None]
    h = model.hidden(x)
    m1, _ = model.mtp_teacher_forced(h[:, :-1], x[:, 1:])
    target = model.logits(h[0, 1:]).argmax(-1)
    draft = model.logits(m1[0]).argmax(-1)
    return {"offset": TF_OFFSET, "tokens": TF_TOKENS, "first_draft": float((target == draft).double().mean())}


def drafts(model, H, seq, pending, k):
    """k greedy drafts after seq + [pending]; H: the target's rows of seq."""
    nxt = torch.tensor(seq[1:] + [pending])[None]
    m, past = model.mtp_teacher_forced(H, nxt)
    hid, out = m[:, -1:], [argmax(model.logits(m[0, -1]))]
    pos = len(seq)
    while len(out) < k:
        x = model.mtp.layer_input(model.embed_tokens(torch.tensor([[out[-1]]])), hid)
        hid, kv = model.mtp.run(x, torch.tensor([pos]), past=past)
        past = (torch.cat([past[0], kv[0]], 1), torch.cat([past[1], kv[1]], 1))
        out.append(argmax(model.logits(hid[0, -1])))
        pos += 1
    return out


def speculative(model, prompt, n_gen, K, stats):
    seq = list(prompt)
    H = model.hidden(torch.tensor(seq)[None])
    pending = argmax(model.logits(H[0, -1]))
    out = [pending]
    while len(out) < n_gen:
        k = min(K, n_gen - len(out) - 1)
        d = drafts(model, H, seq, pending, k) if k > 0 else []
        block = seq + [pending] + d
        Hb = model.hidden(torch.tensor(block)[None])
        target = [argmax(model.logits(Hb[0, len(seq) + i])) for i in range(k + 1)]
        a = 0
        while a < k and d[a] == target[a]:
            a += 1
        for i in range(min(a + 1, k)):          # depth i is checked when 0..i-1 were accepted
            stats["tried"][i] += 1
        for i in range(a):
            stats["hits"][i] += 1
        stats["rounds"] += 1
        stats["drafted"] += k
        stats["accepted"] += a
        seq = seq + [pending] + d[:a]
        pending = target[a]
        out += d[:a] + [pending]
        H = Hb[:, :len(seq)]
    return out[:n_gen]


def measure(model, held):
    report = {"teacher_forced": None, "speculative": {}}
    with torch.no_grad():
        report["teacher_forced"] = teacher_forced(model, held)
        prompts = [held[o:o + SPEC_PROMPT].tolist() for o in SPEC_OFFSETS]
        for K in (1, 2, 3):
            st = {"rounds": 0, "drafted": 0, "accepted": 0, "tried": [0] * K, "hits": [0] * K}
            outputs = [speculative(model, p, SPEC_GEN, K, st) for p in prompts]
            st["per_position"] = [round(h / t, 4) if t else None for h, t in zip(st["hits"], st["tried"])]
            st["tokens_per_forward"] = (len(prompts) * SPEC_GEN - len(prompts)) / st["rounds"]
            st["outputs"] = outputs
            report["speculative"][str(K)] = st
    report["prompts"] = {"offsets": SPEC_OFFSETS, "prompt_tokens": SPEC_PROMPT, "generate": SPEC_GEN,
                         "ids": prompts}
    return report
