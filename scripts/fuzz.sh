#!/usr/bin/env bash
# The fuzzers (docs/fuzzing.md): libFuzzer harnesses for every parser,
# tests/fuzz/fuzz_<parser>.c, built with clang, ASan and UBSan into
# build-fuzz/ (a CMake project of its own: tests/fuzz/CMakeLists.txt).
#
#   scripts/fuzz.sh build                  build libcnx and the harnesses
#   scripts/fuzz.sh regress                build, then run each harness over
#                                          its committed corpus once, then a
#                                          short fuzzing pass (the test step)
#   scripts/fuzz.sh run SECONDS [PARSER]   the long run: each harness (or
#                                          one) for SECONDS; prints the
#                                          executions per parser; exit 1 on
#                                          a crash
#   scripts/fuzz.sh list                   the parsers
#
# Environment: CNX_FUZZ_BUILD (build-fuzz), CNX_FUZZ_JOBS (parallel
# processes, at most 2; default 2), CNX_FUZZ_REGRESS_SECONDS (the short
# pass per harness, default 2), CNX_FUZZ_RUNS (run: stop a parser once
# its processes together made this many executions; default: none),
# CNX_FUZZ_SOURCE (a tree whose libcnx to fuzz instead of this one's, e.g.
# a `git archive` of a commit; the harnesses are always this tree's).
# Corpora: tests/fuzz/corpus/<parser>/ (read only here); what a run finds
# goes to build-fuzz/work/<parser>/, crashes to build-fuzz/crashes/<parser>/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${CNX_FUZZ_BUILD:-build-fuzz}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
JOBS=${CNX_FUZZ_JOBS:-2}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=2
[ "$JOBS" -le 2 ] || JOBS=2
CORPUS=$ROOT/tests/fuzz/corpus
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Per input: 10 s at most, 2.5 GB at most (a bigger input is a finding).
FLAGS=(-timeout=10 -rss_limit_mb=2560 -print_final_stats=0)

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 2
}

parsers() {
  local f
  for f in "$ROOT"/tests/fuzz/fuzz_*.c; do
    f=${f##*/fuzz_}
    echo "${f%.c}"
  done
}

build() {
  local cc cxx
  cc=$(command -v clang || command -v clang-14 || true)
  cxx=$(command -v clang++ || command -v clang++-14 || true)
  [ -n "$cc" ] && [ -n "$cxx" ] ||
    { echo "fuzz: clang is not installed (scripts/setup.sh)" >&2; exit 1; }
  CC=$cc CXX=$cxx cmake -S "$ROOT/tests/fuzz" -B "$BUILD" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCNX_ROOT="${CNX_FUZZ_SOURCE:-$ROOT}" >/dev/null
  cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
  echo "fuzz: built $(parsers | wc -l) harnesses in ${BUILD#"$ROOT"/}"
}

# The regression pass of one parser: every committed input once, then a
# short pass from them (new inputs to a scratch directory).
regress_one() {
  local p=$1 secs=$2 bin=$BUILD/fuzz_$1 work=$BUILD/work-regress/$1
  local crashes=$BUILD/crashes/$1 log=$BUILD/logs/regress-$1.log
  rm -rf "$work"
  mkdir -p "$work" "$crashes" "$BUILD/logs" "$CORPUS/$p"
  if ! "$bin" "${FLAGS[@]}" -artifact_prefix="$crashes/" -runs=0 \
       "$CORPUS/$p" >"$log" 2>&1; then
    echo "FAIL $p: a committed input crashes (log: ${log#"$ROOT"/})"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -5
    return 1
  fi
  if ! "$bin" "${FLAGS[@]}" -artifact_prefix="$crashes/" \
       -max_total_time="$secs" "$work" "$CORPUS/$p" >>"$log" 2>&1; then
    echo "FAIL $p: crash in the short pass (log: ${log#"$ROOT"/})"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -5
    return 1
  fi
  local n
  n=$(ls "$CORPUS/$p" | wc -l)
  printf '  %-16s ok: %4d inputs, %s\n' "$p" "$n" \
    "$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1)"
}

regress() {
  local secs=${CNX_FUZZ_REGRESS_SECONDS:-2} t0=$SECONDS fail=0 p pids=()
  build
  mkdir -p "$BUILD/logs"
  rm -f "$BUILD"/logs/regress-*
  # JOBS at a time; each writes its own log.
  for p in $(parsers); do
    regress_one "$p" "$secs" > "$BUILD/logs/regress-$p.out" 2>&1 &
    pids+=($!)
    if [ ${#pids[@]} -ge "$JOBS" ]; then
      wait "${pids[0]}" || fail=1
      pids=("${pids[@]:1}")
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
  cat "$BUILD"/logs/regress-*.out
  echo "fuzz: regression pass over $(parsers | wc -l) parsers in $((SECONDS - t0)) s"
  [ "$fail" -eq 0 ] || { echo "fuzz: FAILED (see docs/fuzzing.md, 'A crash')"; exit 1; }
}

# Executions a libFuzzer log reports: its "Done N runs" line, else its
# last status line "#N" (a process that crashed).
execs_of() {
  local n
  n=$(grep -oE 'Done [0-9]+ runs' "$1" | tail -1 | grep -oE '[0-9]+' || true)
  [ -n "$n" ] || n=$(grep -oE '^#[0-9]+' "$1" | tail -1 | tr -d '#' || true)
  echo "${n:-0}"
}

run_one() {
  local p=$1 secs=$2 bin=$BUILD/fuzz_$1 work=$BUILD/work/$1
  local crashes=$BUILD/crashes/$1 logs=$BUILD/logs/run-$1 total=0 crashed=0
  local runs=() j t0=$SECONDS
  [ -x "$bin" ] || { echo "fuzz: no harness '$p' (scripts/fuzz.sh list)" >&2; return 2; }
  rm -rf "$logs"
  mkdir -p "$work" "$crashes" "$logs" "$CORPUS/$p"
  [ -z "${CNX_FUZZ_RUNS:-}" ] || runs=(-runs=$(( (CNX_FUZZ_RUNS + JOBS - 1) / JOBS )))
  # JOBS independent processes sharing the working corpus (each reloads
  # it as the others add to it).
  for ((j = 0; j < JOBS; j++)); do
    "$bin" "${FLAGS[@]}" -artifact_prefix="$crashes/" -max_total_time="$secs" \
      -reload=10 "${runs[@]}" "$work" "$CORPUS/$p" >"$logs/job-$j.log" 2>&1 &
  done
  for ((j = 0; j < JOBS; j++)); do wait -n || crashed=1; done
  for ((j = 0; j < JOBS; j++)); do
    total=$((total + $(execs_of "$logs/job-$j.log")))
    if grep -qE 'Test unit written to|==ERROR|runtime error' "$logs/job-$j.log"; then
      crashed=1
    fi
  done
  printf '%-16s %12d executions in %4d s (%d processes)  %s\n' "$p" "$total" \
    $((SECONDS - t0)) "$JOBS" "$([ $crashed -eq 0 ] && echo 'no crash' || echo 'CRASH')"
  if [ $crashed -ne 0 ]; then
    grep -hE 'runtime error|ERROR: AddressSanitizer|ERROR: libFuzzer|Test unit written to' \
      "$logs"/job-*.log | head -6 | sed 's/^/    /'
    return 1
  fi
}

run() {
  local secs=${1:-} only=${2:-} fail=0 p
  [[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || usage
  build
  for p in ${only:-$(parsers)}; do
    run_one "$p" "$secs" || fail=1
  done
  [ "$fail" -eq 0 ] || { echo "fuzz: crash(es) found: build-fuzz/crashes/ (docs/fuzzing.md)"; exit 1; }
}

case "${1:-}" in
  build) build ;;
  regress) regress ;;
  run) shift; run "$@" ;;
  list) parsers ;;
  *) usage ;;
esac
