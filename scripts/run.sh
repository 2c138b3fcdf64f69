#!/usr/bin/env bash
# The main job: build nextn and generate from the default model.
# Until the trained default model is bundled (models/default), this creates a
# small random Qwen3.5 fixture checkpoint and generates from token ids, so the
# output is token ids from random weights. Extra arguments go to
# `nextn generate` (e.g. -n 200 --temp 0.8 --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=$(scripts/build.sh release)
model=models/default
if [ ! -f "$model/config.json" ]; then
  model=models/fixture-tiny
  [ -f "$model/config.json" ] || "$dir/nextn-fixture" --preset tiny --seed 1 --out "$model" >/dev/null
  echo "nextn: no bundled model yet; using the random fixture $model" >&2
fi
"$dir/nextn" inspect -m "$model"
exec "$dir/nextn" generate -m "$model" --prompt-ids 1,2,3,4,5,6,7,8 -n 64 --stats "$@"
