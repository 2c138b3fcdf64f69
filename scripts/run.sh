#!/usr/bin/env bash
# The main job: build nextn and generate with MTP speculative decoding from
# the default model. Until the trained default model is bundled
# (models/default), this creates a small random Qwen3.5 checkpoint whose MTP
# head is built to copy a bigram version of the target (nextn-fixture
# --copy-head), so drafts are partly accepted; it has no tokenizer, so the
# prompt and the output are token ids. Extra arguments go to `nextn generate`
# (e.g. -n 200 --draft auto, or --mtp off to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=$(scripts/build.sh release)
model=models/default
if [ ! -f "$model/config.json" ]; then
  model=models/fixture-tiny-copy
  [ -f "$model/config.json" ] || "$dir/nextn-fixture" --preset tiny --seed 1 --copy-head 0.05 --out "$model" >/dev/null
  echo "nextn: no bundled model yet; using the random fixture $model (copy-head MTP)" >&2
fi
"$dir/nextn" inspect -m "$model"
exec "$dir/nextn" generate -m "$model" --prompt-ids 1,2,3,4,5,6,7,8 -n 64 --ignore-eos --stats "$@"
