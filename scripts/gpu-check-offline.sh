#!/usr/bin/env bash
# The GPU check for a machine with no network: the `device` tool's H200 (torch and transformers
# installed, no vLLM, no package registry, 64 MiB carried per call). scripts/gpu-check.sh is the
# check for a GPU machine that can install vLLM; docs/python.md ("GPU") says how to call this one.
#
#   scripts/gpu-check-offline.sh --prepare [--wheel FILE]   here: fills target/gpu-carry/
#   scripts/gpu-check-offline.sh [options]                  there (or here with --device cpu)
#
# --prepare (with the repo's .venv, PYTHON= to override): the gauge-sampling wheel built from this
# checkout (maturin; reused while wheel_hash is unchanged; --wheel FILE takes a given one), the
# default model's config and tokenizer files without weights, and the size of what a call carries
# (tracked + untracked files + target/gpu-carry), refused over 60 MiB.
#
# The check, each step under what is left of --budget seconds:
#  1. pip install --no-index --no-deps --target of the carried wheel, which must import from there;
#  2. a seeded random-init model of the default model's shape, made on --device
#     (scripts/random-init-model.py): the default model's weights cannot travel;
#  3. python/tests/test_hf.py on --device with CI=1 (nothing may skip), the model tests on that
#     model: all of it in the first of --dtypes, the model tests (-k model_) in the others, less
#     test_model_ctrl_tokens_move_with_a_shift (a fact of the default model's rows, not of a
#     random one) and less what --pytest-k EXPR leaves out;
#  4. `python -m gauge_sampling probe --engine hf` (quick grid, + --probe-args) on that model in
#     each of --probe-dtypes; it exits 1 if the validity gate fails (θ = 1 flips);
#  5. python/bench/bench_processors.py on --device: gauge's HF processor against transformers'
#     RepetitionPenaltyLogitsProcessor, batch --batches, vocabulary --vocab, rows in --bench-dtypes.
# A step gets at most half of what is left (at least 30 s), so one that hangs leaves time for
# the others. Logs, the probe's run directories (one .tar.gz) and the bench tables go to $OUT (at most 8 flat
# files: what the device tool brings back), target/gpu-check-offline when OUT is unset; the
# summary is printed last and written to $OUT/summary.txt. Exit 0 only if every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/wheel-hash.sh

CARRY=target/gpu-carry
DEVICE=cuda
DTYPES="float32 bfloat16 float16"
PROBE_DTYPES="bfloat16 float32"
PROBE_ARGS=""
BENCH_DTYPES="float32 bfloat16"
BATCHES=1,64,256
VOCAB=151936
REPEATS=30
BUDGET=540
PYTEST_K=""
SEED=0
PY="${PYTHON:-python3}"
PREPARE=0
GIVEN_WHEEL=""
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) PREPARE=1 ;;
    --wheel) GIVEN_WHEEL="$2"; shift ;;
    --carry) CARRY="$2"; shift ;;
    --device) DEVICE="$2"; shift ;;
    --dtypes) DTYPES="$2"; shift ;;
    --probe-dtypes) PROBE_DTYPES="$2"; shift ;;
    --probe-args) PROBE_ARGS="$2"; shift ;;
    --bench-dtypes) BENCH_DTYPES="$2"; shift ;;
    --batches) BATCHES="$2"; shift ;;
    --vocab) VOCAB="$2"; shift ;;
    --repeats) REPEATS="$2"; shift ;;
    --budget) BUDGET="$2"; shift ;;
    --pytest-k) PYTEST_K="$2"; shift ;;
    --seed) SEED="$2"; shift ;;
    --python) PY="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check-offline: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# The files of the default model's HF conversion that describe it, without the weights.
SHAPE_FILES="config.json generation_config.json tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja"
LIMIT_MIB=60

bytes_of() { xargs -0 -r du -cb 2>/dev/null | awk 'END { print ($1 == "" ? 0 : $1) }'; }

prepare() {
  set -e
  local py="${PYTHON:-.venv/bin/python}" maturin="${MATURIN:-.venv/bin/maturin}"
  mkdir -p "$CARRY/model"
  local want; want="$(wheel_hash)"
  if [ -n "$GIVEN_WHEEL" ]; then
    rm -f "$CARRY"/gauge_sampling-*.whl
    cp "$GIVEN_WHEEL" "$CARRY/"
    echo "given $(basename "$GIVEN_WHEEL")" > "$CARRY/wheel.hash"
    echo "prepare: wheel $GIVEN_WHEEL (given; its sources are not known)"
  elif ls "$CARRY"/gauge_sampling-*.whl >/dev/null 2>&1 && [ "$(cat "$CARRY/wheel.hash" 2>/dev/null)" = "$want" ]; then
    echo "prepare: wheel $(ls "$CARRY"/gauge_sampling-*.whl) is built from these sources"
  else
    [ -x "$maturin" ] || maturin=maturin
    echo "prepare: building the wheel from this checkout ($maturin; ~6 min on 2 cores)"
    rm -rf "$CARRY/wheel-build"
    "$maturin" build --release --quiet -m crates/gauge-py/Cargo.toml -o "$CARRY/wheel-build"
    rm -f "$CARRY"/gauge_sampling-*.whl
    mv "$CARRY"/wheel-build/gauge_sampling-*.whl "$CARRY/"
    rm -rf "$CARRY/wheel-build"
    echo "$want" > "$CARRY/wheel.hash"
  fi
  # The default model's shape: its HF conversion (made once by transformers from the GGUF and
  # cached by gauge_sampling.lab.models.hf_folder); only the config and tokenizer files travel.
  local folder
  folder="$("$py" -c 'from gauge_sampling import _native; from gauge_sampling.lab.models import hf_folder, resolve
ref = resolve(_native.default_model()); print(hf_folder(ref)); print(ref.gguf)')"
  local conv="${folder%%$'\n'*}" gguf="${folder#*$'\n'}"
  rm -f "$CARRY"/model/*
  for f in $SHAPE_FILES; do [ -f "$conv/$f" ] && cp "$conv/$f" "$CARRY/model/"; done
  {
    echo "Config and tokenizer files of the default model ($( "$py" -c 'from gauge_sampling import _native; print(_native.default_model())')),"
    echo "copied by scripts/gpu-check-offline.sh --prepare on $(date -u +%F) from $conv,"
    echo "transformers' conversion of $gguf (sha256 $(sha256sum "$gguf" | cut -c1-16)...)."
    echo "No weights: scripts/random-init-model.py makes a seeded random-init model of this shape."
  } > "$CARRY/model/PROVENANCE.txt"
  set +e
  # What one `run` call carries: the tracked and the untracked-not-ignored files, and the carry.
  local tracked untracked carried total
  tracked=$(git ls-files -z | bytes_of)
  untracked=$(git ls-files -z --others --exclude-standard | bytes_of)
  carried=$(find "$CARRY" -type f -print0 | bytes_of)
  total=$((tracked + untracked + carried))
  mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
  echo "prepare: carried $(mib $total) MiB = tracked $(mib $tracked) + untracked $(mib $untracked)" \
    "+ $CARRY $(mib $carried) (the device tool's limit: 64 MiB; refused here over $LIMIT_MIB)"
  ls -l "$CARRY" "$CARRY/model"
  if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "prepare: too large to carry (untracked files: git ls-files --others --exclude-standard)" >&2
    return 1
  fi
  echo "prepare: done; carry [\"$CARRY\"] and run scripts/gpu-check-offline.sh there"
}

if [ "$PREPARE" = 1 ]; then
  prepare
  exit $?
fi

# ---------------------------------------------------------------------------------------------
OUT="${OUT:-target/gpu-check-offline}"
[ "$OUT" = target/gpu-check-offline ] && rm -rf "$OUT"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="${TMPDIR:-/tmp}/gauge-gpu-check-offline"
rm -rf "$WORK"
mkdir -p "$WORK"
SITE="$WORK/site"
MODEL="$WORK/SmolLM2-135M-shape-random-seed$SEED"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
status=0
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - SECONDS > 1 ? BUDGET - SECONDS : 1)); }
# A step's limit: half of what is left, at least 30 s, never more than what is left.
cap() {
  local l; l=$(left)
  local c=$((l / 2 > 30 ? l / 2 : 30))
  echo $((c < l ? c : l))
}
# step NAME LOG CMD...: runs CMD under cap, output appended to LOG.
step() {
  local name="$1" log="$2" t0=$SECONDS rc
  shift 2
  echo "== $name" >> "$log"
  local limit; limit=$(cap)
  timeout "$limit" "$@" >> "$log" 2>&1
  rc=$?
  local how="rc $rc"
  [ $rc -eq 124 ] && how="stopped at its limit, $limit s (--budget $BUDGET s)"
  if [ $rc -eq 0 ]; then
    say "PASS $name ($((SECONDS - t0)) s)"
  else
    say "FAIL $name ($((SECONDS - t0)) s, $how; log: $(basename "$log"))"
    status=1
  fi
  return $rc
}

say "gpu-check-offline $(date -u +%FT%TZ) on $(uname -n): device $DEVICE; budget $BUDGET s"
if command -v nvidia-smi >/dev/null; then
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
fi
WHEEL="$(ls "$CARRY"/gauge_sampling-*.whl 2>/dev/null | head -1)"
if [ -z "$WHEEL" ]; then
  say "FAIL no wheel in $CARRY (run scripts/gpu-check-offline.sh --prepare where the venv is, and carry $CARRY)"
  exit 1
fi
step "install $(basename "$WHEEL") (pip --no-index --no-deps --target)" "$OUT/steps.log" \
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$SITE" "$WHEEL" || { cat "$OUT/steps.log"; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! versions="$("$PY" - "$SITE" <<'EOF' 2>&1
import sys
from pathlib import Path

import gauge_sampling
import torch
import transformers

site = Path(sys.argv[1]).resolve()
where = Path(gauge_sampling.__file__).resolve()
if site not in where.parents:
    sys.exit(f"gauge_sampling imports from {where}, not from the carried wheel in {site}")
# The package's sources in this tree (either layout of crates/gauge-py).
trees = [Path("crates/gauge-py/gauge_sampling"), Path("crates/gauge-py/python/gauge_sampling")]
tree = next((t for t in trees if (t / "__init__.py").is_file()), None)
if tree is None:
    sys.exit(f"no gauge_sampling sources in this tree ({', '.join(map(str, trees))})")
differ = [
    str(p.relative_to(tree))
    for p in sorted(tree.rglob("*.py"))
    if not (where.parent / p.relative_to(tree)).is_file()
    or (where.parent / p.relative_to(tree)).read_bytes() != p.read_bytes()
]
print(f"python {sys.version.split()[0]} ({sys.executable}), torch {torch.__version__}, "
      f"transformers {transformers.__version__}, gauge_sampling {gauge_sampling.__version__}; "
      f"cuda available: {torch.cuda.is_available()}")
print("wheel's Python files: " + ("the tree's" if not differ else "DIFFER from the tree's: " + ", ".join(differ)))
EOF
)"; then
  say "FAIL import from the carried wheel: $versions"
  exit 1
fi
say "$versions"
stamp="$(cat "$CARRY/wheel.hash" 2>/dev/null || echo none)"
if [ "$stamp" = "$(wheel_hash)" ]; then
  say "wheel: built from these sources (wheel_hash ${stamp:0:12})"
else
  say "WARN wheel: not stamped with these sources' wheel_hash (stamp: ${stamp:0:40}); rerun --prepare"
fi

step "random-init model of the default model's shape (seed $SEED, on $DEVICE)" "$OUT/steps.log" \
  "$PY" scripts/random-init-model.py "$CARRY/model" "$MODEL" --seed "$SEED" --device "$DEVICE" \
  && say "  $(grep '^random-init model' "$OUT/steps.log" | tail -1)"

first=1
for dt in $DTYPES; do
  log="$OUT/pytest-$dt.log"
  k="not ctrl_tokens_move"
  [ $first = 0 ] && k="model_ and $k"
  [ -n "$PYTEST_K" ] && k="$k and ($PYTEST_K)"
  step "pytest test_hf.py -k '$k' ($dt model, on $DEVICE)" "$log" \
    env CI=1 GAUGE_TEST_DEVICE="$DEVICE" GAUGE_TEST_DTYPE="$dt" GAUGE_TEST_HF_MODEL="$MODEL" \
    "$PY" -m pytest -v -rfEs -p no:cacheprovider python/tests/test_hf.py -k "$k"
  say "  $(grep -E '(passed|failed|error|skipped|deselected)( |,|$)' "$log" | tail -1 | sed 's/^=* //; s/ =*$//')"
  first=0
done

for dt in $PROBE_DTYPES; do
  # shellcheck disable=SC2086 # --probe-args is a list of flags
  step "probe --engine hf (quick grid $PROBE_ARGS, $dt, on $DEVICE)" "$OUT/probe.log" \
    "$PY" -m gauge_sampling probe --engine hf --model "$MODEL" --device "$DEVICE" --dtype "$dt" \
    --out "$WORK/probe-results" $PROBE_ARGS
  say "  $(grep -E '^probe \(' "$OUT/probe.log" | tail -1)"
done
[ -d "$WORK/probe-results" ] && tar -czf "$OUT/probe-runs.tar.gz" -C "$WORK" probe-results

for dt in $BENCH_DTYPES; do
  step "bench_processors (batch $BATCHES, vocab $VOCAB, $dt rows, on $DEVICE)" "$OUT/bench.md" \
    "$PY" python/bench/bench_processors.py --device "$DEVICE" --dtype "$dt" --batch "$BATCHES" \
    --vocab "$VOCAB" --repeats "$REPEATS"
done

if [ -f "$OUT/bench.md" ]; then
  say ""
  grep -E '^(machine|\|)' "$OUT/bench.md" | tee -a "$SUMMARY"
fi
say ""
if [ $status -eq 0 ]; then
  say "gpu-check-offline: everything passed on $DEVICE in $SECONDS s (files in $OUT)"
else
  say "gpu-check-offline: failures above, in $SECONDS s (logs in $OUT)"
fi
exit $status
