#!/usr/bin/env bash
# Builds nextn and runs every test twice: a normal optimised build, then the
# whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Installs missing Debian packages first. Exit status 0 only if all pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# the openai client the server tests use, at the version package-lock.json pins
[ -d tests/server/node_modules/openai ] || npm ci --prefix tests/server --no-audit --no-fund --loglevel=error
jobs=$(nproc)
for mode in release sanitize; do
  echo "== $mode build" >&2
  dir=$(scripts/build.sh "$mode")
  echo "== $mode tests" >&2
  # detect_leaks: every owner frees what it allocates (LeakSanitizer is part of ASan).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs"
done
