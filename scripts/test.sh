#!/usr/bin/env bash
# All tests, Rust and Python: the README's test command. On a fresh machine it first sets up what
# is missing: the Python venv and the gauge-sampling wheel (scripts/setup-python.sh, run only when
# .venv/ is missing, its pinned packages changed or the wheel's sources changed since it was
# built). System prerequisites (cmake, clang, libclang; valgrind and chromium for two tests under
# CI) are the README's Quick start; `.ci/run` installs them and then runs this script.
#
# Two lanes run at the same time, each pinned to its own half of the cores (`taskset`): lane 1 the
# Rust tests and then the vLLM tests, lane 2 the other Python tests. Most of either suite is one
# decode at a time (llama.cpp on one thread, mlx-lm, llama-cpp-python), so one suite alone leaves
# cores idle; pinned, no lane's spinning threads (ggml's, torch's OpenMP) land on the other's
# cores. Each lane's log is under target/test-logs/, a progress line comes once a minute and both
# logs are printed in full at the end. With one core, without taskset or with GAUGE_TEST_LANES=0
# the suites run one after the other, Rust first.
#
# Extra arguments go to pytest (e.g. `scripts/test.sh -k hf`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-python.sh --if-stale
# With candle (cargo feature, off in a plain build): the second Rust engine behind the LogitSource
# seam, its grid check and the candle_fix example (crates/gauge-engine/tests/candle.rs,
# crates/gauge-cli/tests/candle_probe.rs). One build for every test: a separate candle build
# would compile most of the tree again (tokenizers changes features of shared crates).
rust=(cargo test --workspace --release --features gauge-cli/candle)
# The 20 slowest tests close each log: CI time is a budget (issue 20), this is where it goes.
pytest=(.venv/bin/python -m pytest --durations=20)
# Lane 1's Python files, after the Rust tests: about what balances the lanes on 2 cores (measured
# in docs/python.md, "Test time").
lane1_python=(python/tests/test_vllm_serve.py python/tests/test_vllm.py)

# Build every Rust test on every core first, so the lanes only run tests.
"${rust[@]}" --no-run

# The cores this process may use, split in two, and how many each lane has.
read -r lane1_cpus lane2_cpus n1 n2 < <(.venv/bin/python -c '
import os
c = sorted(os.sched_getaffinity(0))
h = len(c) // 2
print(",".join(map(str, c[:h])) or "-", ",".join(map(str, c[h:])), h, len(c) - h)')
if [ "${GAUGE_TEST_LANES:-1}" = "0" ] || [ "$lane1_cpus" = "-" ] || ! command -v taskset >/dev/null; then
  "${rust[@]}"
  "${pytest[@]}" python/tests "$@"
  exit
fi

# pytest on some files; "no test collected" (exit 5, e.g. a -k that selects none of them) is fine.
pytest_part() {
  local rc=0
  "${pytest[@]}" "$@" || rc=$?
  [ "$rc" -eq 5 ] && rc=0
  return "$rc"
}
lane1() {
  local rc=0
  "${rust[@]}" || rc=$?
  pytest_part "${lane1_python[@]}" "$@" || rc=$?
  return "$rc"
}
lane2() {
  local skip=()
  for f in "${lane1_python[@]}"; do skip+=("--ignore=$f"); done
  pytest_part python/tests "${skip[@]}" "$@"
}

logs=target/test-logs
mkdir -p "$logs"
echo "test.sh: lane 1 (Rust, then ${lane1_python[*]##*/}) on cores $lane1_cpus," \
  "lane 2 (the other Python tests) on cores $lane2_cpus; logs: $logs/lane1.log, $logs/lane2.log"
start=$SECONDS
# candle sizes its thread pool from the machine's physical cores, not the affinity mask: on a
# one-core lane its two spinning threads made crates/gauge-engine/tests/candle.rs 443 s instead of
# 134 s. CANDLE_NUM_THREADS and RAYON_NUM_THREADS give it (and rayon users) the lane's count.
# `start_lane CPUS N LANE ARGS...` runs the function LANE pinned to CPUS, logged to $logs/LANE.log.
start_lane() {
  local cpus=$1 n=$2 lane=$3
  shift 3
  taskset -c "$cpus" env CANDLE_NUM_THREADS="$n" RAYON_NUM_THREADS="$n" \
    bash -c "$(declare -p rust pytest lane1_python); $(declare -f pytest_part lane1 lane2); $lane \"\$@\"" \
    "$lane" "$@" > "$logs/$lane.log" 2>&1 &
}
start_lane "$lane1_cpus" "$n1" lane1 "$@"
pid1=$!
start_lane "$lane2_cpus" "$n2" lane2 "$@"
pid2=$!
trap 'kill "$pid1" "$pid2" 2>/dev/null || true' EXIT

# Progress once a minute: the Rust test binary or pytest's percentage each lane is at, and when
# each lane ended (the two should take about as long).
running() { kill -0 "$1" 2>/dev/null; }
at() {
  # "Running tests/x.rs (target/release/deps/x-<hash>)", "Doc-tests <crate>" or "[ 45%]".
  grep -oE 'deps/[^)]*\)|Doc-tests .*|\[ *[0-9]+%\]' "$1" | tail -1 \
    | sed -E 's/^deps.//; s/-[0-9a-f]+\)$//; s/^\[ *([0-9]+%)\]$/pytest \1/'
}
state() { if [ -n "$1" ]; then echo "done in $1 s"; else at "$2" || true; fi; }
s1="" s2=""
while running "$pid1" || running "$pid2"; do
  for _ in $(seq 60); do
    sleep 1
    running "$pid1" || [ -n "$s1" ] || s1=$((SECONDS - start))
    running "$pid2" || [ -n "$s2" ] || s2=$((SECONDS - start))
    running "$pid1" || running "$pid2" || break
  done
  printf 'test.sh: [%dm%02ds] lane 1: %s | lane 2: %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) \
    "$(state "$s1" "$logs/lane1.log")" "$(state "$s2" "$logs/lane2.log")"
done
rc1=0 rc2=0
wait "$pid1" || rc1=$?
wait "$pid2" || rc2=$?
trap - EXIT

echo "==== lane 1: Rust tests, then ${lane1_python[*]} ($logs/lane1.log) ===="
cat "$logs/lane1.log"
echo "==== lane 2: the other Python tests ($logs/lane2.log) ===="
cat "$logs/lane2.log"
echo "test.sh: lane 1 exit $rc1 after ${s1:-?} s, lane 2 exit $rc2 after ${s2:-?} s (cores $lane1_cpus | $lane2_cpus)"
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
