#!/usr/bin/env bash
# MTP acceptance and decode speed on the bundled default model (models/default),
# from the 8 held-out prompts the training side used (tests/data/default-model/
# spec_prompts.txt), greedy, every prompt generating N tokens (default 96, as the
# training side's acceptance.json; larger N for steadier speed figures):
#     bench/mtp-default.sh [N] [THREADS]
# Prints, for --mtp off and --draft 1, 2, 3: decode tok/s (sum of decoded tokens
# over sum of decode seconds; the token the prefill gives is the prefill's), acceptance per draft position, tokens per target forward.
# Run it with nothing else busy on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NEXTN:-$root/build/release/nextn}
n=${1:-96}
threads=${2:-2}
prompts=$root/tests/data/default-model/spec_prompts.txt
for mode in off 1 2 3; do
  if [ "$mode" = off ]; then flags="--mtp off"; else flags="--draft $mode"; fi
  while read -r ids; do
    "$bin" generate -m "$root/models/default" -t "$threads" --prompt-ids "$ids" -n "$n" --ignore-eos --json $flags
  done < "$prompts" | python3 -c '
import json, sys
mode = sys.argv[1]
runs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
tok = sum(r["stats"]["generated_tokens"] for r in runs)
dec = sum(r["stats"]["decode_tokens"] for r in runs)
sec = sum(r["stats"]["decode_s"] for r in runs)
line = f"{mode:>8}: {len(runs)} prompts, decode {dec / sec:8.1f} tok/s"
if mode != "off":
    k = len(runs[0]["mtp"]["per_position"])
    tried = [sum(r["mtp"]["per_position_tried"][i] for r in runs) for i in range(k)]
    hits = [sum(round(r["mtp"]["per_position"][i] * r["mtp"]["per_position_tried"][i]) for r in runs) for i in range(k)]
    fw = sum(r["mtp"]["rounds"] for r in runs)
    line += "; per position " + " ".join(f"{h / t:.3f}" if t else "-" for h, t in zip(hits, tried))
    line += f"; {dec / fw:.2f} tokens per verify"
print(line)' "$([ "$mode" = off ] && echo off || echo "K=$mode")"
done
