"""Step 4: the loss curves of WORK/curves.json as a PNG."""

import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def smooth(v, k=10):
    return [sum(v[max(0, i - k + 1):i + 1]) / len(v[max(0, i - k + 1):i + 1]) for i in range(len(v))]


def main(curves_path, png_path):
    c = json.load(open(curves_path))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for key, label, color in (("train", "target (t+1)", "C0"), ("train_mtp1", "MTP step 1 (t+2)", "C1"),
                              ("train_mtp2", "MTP step 2 (t+3)", "C2")):
        ax.plot(c["step"], smooth(c[key]), color=color, alpha=0.5, label=f"train {label}")
        ax.plot(c["eval_step"], c[key.replace("train", "eval")], "o-", color=color, ms=3, label=f"held-out {label}")
    final = c["eval"][-1]
    ax.set_title(f"nextn default model (KJV): held-out loss {final:.3f}, perplexity {math.exp(final):.1f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_ylim(bottom=min(min(c["eval_mtp2"]), min(c["eval"])) - 0.3, top=6.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
