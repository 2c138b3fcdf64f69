#!/usr/bin/env bash
# The main job: build nextn and generate text with MTP speculative decoding
# from the bundled default model (models/default: a 5.7 M-parameter Qwen3.5
# with its MTP head, trained on the King James Bible by tools/train/run.sh).
# `nextn generate` with no -m uses that model. Prints the acceptance
# statistics after the text. Extra arguments go to `nextn generate`, e.g.
#   bash scripts/run.sh -p "Blessed are" -n 300 --draft 3
#   bash scripts/run.sh --mtp off          # plain decoding, to compare
#   bash scripts/run.sh --temp 0.7 --top-p 0.8 --seed 1 --accept rejection
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=$(scripts/build.sh release)
prompt="And God said unto Moses,"
for a in "$@"; do case $a in -p|--prompt|-f|--file|--prompt-ids|--load-state) prompt=;; esac; done
if [ -n "$prompt" ]; then set -- -p "$prompt" "$@"; fi
exec "$dir/nextn" generate -n 200 --echo --stats --temp 0.7 --top-p 0.8 --top-k 20 --seed 1 "$@"
