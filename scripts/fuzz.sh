#!/usr/bin/env bash
# Fuzzes one harness of tests/fuzz with libFuzzer (tests/fuzz/README.md).
#
#   scripts/fuzz.sh TARGET [SECONDS] [-- LIBFUZZER_FLAGS...]
#   scripts/fuzz.sh --list
#
# TARGET is a name from --list (fuzz_oai_request or oai_request). Configures
# build/fuzz with clang and NEXTN_FUZZ=ON (RelWithDebInfo, the whole tree
# under ASan + UBSan with coverage hooks), builds that one target and runs it
# in one process for SECONDS (default 300). The corpus grows in
# build/fuzz/corpus/TARGET and starts from tests/data/fuzz/TARGET (read, never
# written); tests/fuzz/TARGET.dict is the dictionary when there is one; crashes,
# timeouts and leaks are saved in build/fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/fuzz.sh TARGET [SECONDS] [-- LIBFUZZER_FLAGS...] | --list" >&2
  exit 2
}

if [ "${1:-}" = "--list" ]; then
  # each harness's name and the first sentence of its header comment
  for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    what=$(awk 'NR == 1 { sub(/^\/\* *[^ ]* — */, "") } NR > 1 { sub(/^ \* */, "") }
                { printf "%s ", $0 } /\.$/ { exit }' "$src")
    printf '%-15s %s\n' "${name#fuzz_}" "$what"
  done
  exit 0
fi
[ $# -ge 1 ] || usage
target=${1#fuzz_}
shift
[ -f "tests/fuzz/fuzz_$target.c" ] || { echo "no harness tests/fuzz/fuzz_$target.c (scripts/fuzz.sh --list)" >&2; exit 2; }
seconds=300
if [ $# -ge 1 ] && [ "$1" != "--" ]; then
  seconds=$1
  shift
fi
[[ "$seconds" =~ ^[0-9]+$ ]] || usage
if [ $# -ge 1 ]; then
  [ "$1" = "--" ] || usage
  shift
fi

command -v clang >/dev/null || { echo "scripts/fuzz.sh needs clang, which brings libFuzzer (apt-get install clang)" >&2; exit 2; }
build=build/fuzz
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_FUZZ=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target "fuzz_$target" >&2

corpus=$build/corpus/$target
artifacts=$build/artifacts/$target
mkdir -p "$corpus" "$artifacts"
flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$artifacts/")
[ -f "tests/fuzz/$target.dict" ] && flags+=(-dict="tests/fuzz/$target.dict")
seeds=()
[ -d "tests/data/fuzz/$target" ] && seeds=("tests/data/fuzz/$target")

echo "== fuzz_$target for ${seconds}s: corpus $corpus, artifacts $artifacts/" >&2
stamp=$(mktemp)
rc=0
"$build/tests/fuzz_$target" "${flags[@]}" "$@" "$corpus" "${seeds[@]}" || rc=$?
found=$(find "$artifacts" -type f -newer "$stamp" | head -1)
rm -f "$stamp"

if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
  found=${found:-$artifacts/crash-...}
  cat >&2 <<EOF

== fuzz_$target stopped (exit $rc) with a finding: $found
To keep it fixed:
  1. minimize it (libFuzzer keeps the smallest input that still fails the same way):
       $build/tests/fuzz_$target -minimize_crash=1 -max_total_time=60 -exact_artifact_path=min.bin $found
  2. reproduce it without libFuzzer, as the replay test will:
       cmake --build build/release --target fuzz_$target && build/release/tests/fuzz_$target min.bin
  3. fix the bug (in src/; a check in the harness only if the harness was wrong), and if the
     harness did not notice the bug by itself, add the check that does;
  4. add the input as tests/data/fuzz/$target/<what-it-pins> (a name that says the bug,
     e.g. ckpt-deferred-token-1024.bin), confirm fuzz/$target fails without the fix and
     passes with it, and add a row naming the fixing commit to tests/fuzz/README.md.
EOF
else
  echo "== fuzz_$target: no finding in ${seconds}s (the corpus is kept for the next run)" >&2
fi
exit "$rc"
