#!/usr/bin/env bash
# Builds nextn into build/<mode> (mode: release | sanitize). Prints the build dir.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-release}
case "$mode" in
  release)  flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  sanitize) flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_SANITIZE=ON) ;;
  *) echo "usage: scripts/build.sh [release|sanitize]" >&2; exit 2 ;;
esac
cmake -S . -B "build/$mode" "${flags[@]}" >/dev/null
cmake --build "build/$mode" -j"$(nproc)" >&2
echo "build/$mode"
