"""Step 3: export the trained model as an HF Qwen3.5 checkpoint, plus the
golden files the C engine's tests compare against.

Checkpoint (OUT, e.g. models/default): config.json (nested text_config, as
Qwen3_5ForConditionalGeneration), model.safetensors in bf16 with raw HF
names (model.language_model.*, mtp.*; zero-centred norms stored as w,
A_log in f32 as official checkpoints keep it; tied, so no lm_head),
generation_config.json, tokenizer.json, tokenizer_config.json.

Golden (GOLDEN, e.g. tests/data/default-model): computed by the
training-side forward in float64 from the bf16-rounded weights, with the
plain per-token Gated DeltaNet loop (the chunked form must agree):
  seqN.txt              token ids of held-out windows
  seqN_logits.npy       target logits [T, V]
  seqN_mtp_logits.npy   teacher-forced MTP logits [T-1, V]: row p = MTP(x_{p+1}, H_p)
  heldout.txt           a longer held-out token run for the acceptance test
  acceptance.json       first-draft agreement on heldout.txt and the
                        simulated greedy speculative runs (acceptance.py)
  spec_prompts.txt      those runs' prompts, one per line (bench/mtp-default.sh)
  heldout_text.txt, heldout_tokens.txt   held-out text and its ids (tokenizer test)
"""

import argparse
import json
import os
import shutil
import struct

import numpy as np
import torch

import acceptance
from qwen35 import Config, Qwen35, gated_delta_chunked, gated_delta_recurrent

import bpe


def load(work):
    ck = torch.load(f"{work}/model.pt")
    cfg = Config(**ck["config"])
    model = Qwen35(cfg)
    model.load_state_dict(ck["state_dict"])
    # what the checkpoint will hold: bf16 everywhere but A_log
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("A_log"):
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return cfg, model.eval()


def hf_name(key):
    return key if key.startswith("mtp.") else "model.language_model." + key


def write_safetensors(path, model):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for key, t in model.state_dict().items():
        if key.endswith("A_log"):
            data, dtype = t.to(torch.float32).numpy().tobytes(), "F32"
        else:
            data, dtype = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes(), "BF16"
        header[hf_name(key)] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def configs(cfg, specials):
    rd = int(cfg.head_dim * cfg.partial_rotary_factor)
    half = rd // 2                                  # mRoPE t/h/w sections ([11, 11, 10] at rd 64)
    section = [(half + 2) // 3, (half + 1) // 3, half // 3]
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
        "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "attention_bias": False, "attn_output_gate": True,
        "layer_types": cfg.layer_types(), "full_attention_interval": cfg.full_attention_interval,
        "linear_num_key_heads": cfg.linear_num_key_heads, "linear_num_value_heads": cfg.linear_num_value_heads,
        "linear_key_head_dim": cfg.linear_key_head_dim, "linear_value_head_dim": cfg.linear_value_head_dim,
        "linear_conv_kernel_dim": cfg.linear_conv_kernel_dim, "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta,
                            "partial_rotary_factor": cfg.partial_rotary_factor,
                            "mrope_section": section, "mrope_interleaved": True},
        "max_position_embeddings": 262144, "tie_word_embeddings": True, "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "eos_token_id": specials["<|endoftext|>"], "dtype": "bfloat16",
    }
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "tie_word_embeddings": True,
        "image_token_id": specials["<|image_pad|>"], "video_token_id": specials["<|video_pad|>"],
        "vision_start_token_id": specials["<|vision_start|>"], "vision_end_token_id": specials["<|vision_end|>"],
        "text_config": text,
    }
    generation = {
        "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
        "eos_token_id": [specials["<|im_end|>"], specials["<|endoftext|>"]],
        "pad_token_id": specials["<|endoftext|>"],
    }
    return config, generation


def save_npy(path, a):
    np.save(path, np.ascontiguousarray(a, dtype=np.float32))


def write_ids(path, ids):
    with open(path, "w") as f:
        f.write(",".join(str(int(i)) for i in ids) + "\n")


def golden(model, held, heldout_text, enc, gdir, a):
    os.makedirs(gdir, exist_ok=True)
    m64 = Qwen35(model.config).double().eval()
    m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    for layer in m64.layers:
        if layer.kind != "full_attention":
            layer.linear_attn.chunked = False          # the plain per-token recurrence
    manifest = {"model": "models/default", "dtype": "float64 forward, bf16-rounded weights", "sequences": []}
    for n, (start, length) in enumerate(zip(a.golden_starts, a.golden_lengths)):
        ids = held[start:start + length]
        x = torch.from_numpy(ids.astype(np.int64))[None]
        with torch.no_grad():
            h = m64.hidden(x)
            m1, _ = m64.mtp_teacher_forced(h[:, :-1], x[:, 1:])
            logits, mtp_logits = m64.logits(h)[0].numpy(), m64.logits(m1)[0].numpy()
            # the chunked form, which training used, must compute the same function
            for layer in m64.layers:
                if layer.kind != "full_attention":
                    layer.linear_attn.chunked = True
            chunked = m64.logits(m64.hidden(x))[0].numpy()
            for layer in m64.layers:
                if layer.kind != "full_attention":
                    layer.linear_attn.chunked = False
        assert np.abs(chunked - logits).max() < 1e-9, "chunked and per-token Gated DeltaNet disagree"
        write_ids(f"{gdir}/seq{n}.txt", ids)
        save_npy(f"{gdir}/seq{n}_logits.npy", logits)
        save_npy(f"{gdir}/seq{n}_mtp_logits.npy", mtp_logits)
        manifest["sequences"].append({"file": f"seq{n}", "eval_offset": int(start), "tokens": int(length)})
    # tokenizer check: a held-out passage and the ids the training side gave it
    with open(f"{gdir}/heldout_text.txt", "w", encoding="utf-8") as f:
        f.write(heldout_text)
    write_ids(f"{gdir}/heldout_tokens.txt", enc.encode(heldout_text))
    with open(f"{gdir}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--golden-starts", type=int, nargs="+", default=[1000, 20000, 40000])
    ap.add_argument("--golden-lengths", type=int, nargs="+", default=[80, 32, 32])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    cfg, model = load(a.work)
    tok = json.load(open(f"{a.work}/tokenizer.json", encoding="utf-8"))
    vocab, merges = tok["model"]["vocab"], [tuple(m) for m in tok["model"]["merges"]]
    specials = bpe.special_ids(vocab)
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(f"{a.out}/model.safetensors", model)
    config, generation = configs(cfg, specials)
    with open(f"{a.out}/config.json", "w") as f:
        json.dump(config, f, indent=2)
    with open(f"{a.out}/generation_config.json", "w") as f:
        json.dump(generation, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{a.work}/{name}", f"{a.out}/{name}")
    print(f"export: {a.out}: {os.path.getsize(a.out + '/model.safetensors') / 1e6:.1f} MB of weights")

    held = np.load(f"{a.work}/eval.npy")
    eval_text = open(f"{a.work}/eval.txt", encoding="utf-8").read()
    golden(model, held, eval_text[:6000], bpe.Encoder(vocab, merges), a.golden, a)
    report = acceptance.measure(model, held)
    with open(f"{a.golden}/acceptance.json", "w") as f:
        json.dump(report, f, indent=1)
    with open(f"{a.golden}/spec_prompts.txt", "w") as f:       # for bench/mtp-default.sh
        f.writelines(",".join(map(str, p)) + "\n" for p in report["prompts"]["ids"])
    write_ids(f"{a.golden}/heldout.txt", held[report["teacher_forced"]["offset"]:
                                              report["teacher_forced"]["offset"] + report["teacher_forced"]["tokens"]])
    print(f"export: golden files in {a.golden}; first-draft agreement (teacher-forced) "
          f"{report['teacher_forced']['first_draft']:.4f}")
    for k, r in report["speculative"].items():
        print(f"export: greedy speculative K={k}: per-position acceptance {r['per_position']}, "
              f"{r['tokens_per_forward']:.2f} tokens per target forward")


if __name__ == "__main__":
    main()
