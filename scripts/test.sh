#!/usr/bin/env bash
# All tests, Rust then Python: the README's test command. On a fresh machine it first sets up what
# is missing: the Python venv and the gauge-sampling wheel (scripts/setup-python.sh, run only when
# .venv/ is missing, its pinned packages changed or the wheel's sources changed since it was
# built). System prerequisites (cmake, clang, libclang; valgrind and chromium for two tests under
# CI) are the README's Quick start; `.ci/run` installs them and then runs this script.
#
# Extra arguments go to pytest (e.g. `scripts/test.sh -k hf`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-python.sh --if-stale
# With candle (cargo feature, off in a plain build): the second Rust engine behind the LogitSource
# seam, its grid check and the candle_fix example (crates/gauge-engine/tests/candle.rs,
# crates/gauge-cli/tests/candle_probe.rs). One build for every test: a separate candle build
# would compile most of the tree again (tokenizers changes features of shared crates).
cargo test --workspace --release --features gauge-cli/candle
# The 20 slowest tests close the log: CI time is a budget (issue 20), this is where it goes.
.venv/bin/python -m pytest python/tests --durations=20 "$@"
