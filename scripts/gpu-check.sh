#!/usr/bin/env bash
# Run on a machine with a CUDA GPU, as it is: installs the CUDA wheels (vLLM's CUDA build with the
# torch it pins, transformers) into .venv-gpu/, builds the gauge-sampling wheel from this checkout,
# runs the HF and vLLM tests with every tensor on `cuda` (the v1 runner, then Model Runner V2),
# then `python -m gauge_sampling probe` on the quick grid and `json` on the 200 schemas with both
# engines on cuda, and prints what passed. Needs: a CUDA driver (nvidia-smi), python3 with venv, a Rust toolchain,
# and the default model (pulled by the gauge CLI on first use).
set -uo pipefail
cd "$(dirname "$0")/.."

if ! nvidia-smi -L; then
  echo "gpu-check: no CUDA GPU visible (nvidia-smi failed); nothing to check here"
  exit 1
fi

set -e
VENV=.venv-gpu
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# vLLM's CUDA wheel pins its torch; transformers/gguf load the GGUF for the HF tests.
"$VENV/bin/python" -m pip install -q vllm transformers gguf accelerate openai -r python/requirements-dev.txt
cargo build --release -q -p gauge-cli
rm -rf target/wheels-gpu
"$VENV/bin/maturin" build --release --quiet -m crates/gauge-py/Cargo.toml -o target/wheels-gpu --interpreter "$VENV/bin/python"
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall target/wheels-gpu/gauge_sampling-*.whl
"$VENV/bin/python" -c "import torch, vllm, transformers; print('gpu-check:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| vllm', vllm.__version__, '| transformers', transformers.__version__)"
set +e

export CI=1 GAUGE_TEST_DEVICE=cuda VLLM_TARGET_DEVICE=cuda
status=0
run() {
  local name="$1"; shift
  echo "== $name"
  if env "$@" "$VENV/bin/python" -m pytest -q -rA python/tests/test_chain.py python/tests/test_hf.py \
      python/tests/test_vllm.py python/tests/test_vllm_serve.py 2>&1 | tee "target/gpu-check-$name.log" | grep -E "^(PASSED|FAILED|ERROR)|passed|failed"; then :; fi
  grep -qE "[0-9]+ failed|[0-9]+ error" "target/gpu-check-$name.log" && status=1
}
run v1-runner VLLM_USE_V2_MODEL_RUNNER=0
run model-runner-v2 VLLM_USE_V2_MODEL_RUNNER=1
# The instrument on both engines: the quick grid on cuda (bfloat16, the default there), into one
# results root, so the second report carries the cross-stack table. The probe's vLLM processor
# implements the v1 interface only (docs/python.md): v1 runner.
rm -rf target/gpu-check-results
# instrument COMMAND WHAT: `python -m gauge_sampling COMMAND` on both engines on cuda.
instrument() {
  local cmd=$1 what=$2 engine
  for engine in hf vllm; do
    echo "== $cmd --engine $engine --device cuda ($what)"
    local out="target/gpu-check-$cmd-$engine"
    if env VLLM_USE_V2_MODEL_RUNNER=0 "$VENV/bin/python" -m gauge_sampling "$cmd" --engine "$engine" --device cuda \
        --out target/gpu-check-results > "$out.txt" 2> "$out.log"; then
      cat "$out.txt"
    else
      echo "FAILED: $cmd --engine $engine (log: $out.log)"; tail -5 "$out.log"; status=1
    fi
  done
}
instrument probe "quick grid"
# A2: the whole 200-schema grid (gauge json's defaults).
instrument json "200 schemas"
if [ $status -eq 0 ]; then echo "gpu-check: everything passed on cuda"; else echo "gpu-check: failures above (logs: target/gpu-check-*.log)"; fi
exit $status
