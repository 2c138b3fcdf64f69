#!/usr/bin/env bash
# Builds nextn into build/<mode> (mode: release | sanitize | tsan). Prints the
# build dir. tsan (ThreadSanitizer) is not part of scripts/test.sh: run
# `ctest` in build/tsan by hand after changing threaded code.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-release}
case "$mode" in
  release)  flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  sanitize) flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_SANITIZE=ON) ;;
  tsan)     flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_TSAN=ON) ;;
  *) echo "usage: scripts/build.sh [release|sanitize|tsan]" >&2; exit 2 ;;
esac
cmake -S . -B "build/$mode" "${flags[@]}" >/dev/null
cmake --build "build/$mode" -j"$(nproc)" >&2
echo "build/$mode"
