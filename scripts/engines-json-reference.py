#!/usr/bin/env python3
"""Record data/engines-json-reference.json: what llama.cpp gives on the small A2 grid of
python/tests/test_json_engines.py, on the default model dequantized to F32 (the weights HF
transformers and vLLM compute with), so the test checks the hf and vllm engines against numbers
it does not compute.

    .venv/bin/python scripts/gguf-to-f32.py SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol-f32.gguf
    .venv/bin/python scripts/engines-json-reference.py target/release/gauge /tmp/smol-f32.gguf

Runs `gauge json` (the gauge stack, whose ctrl equals llama.cpp's own chain token for token) with
the grid's flags and keeps, per output, the tokens, the stop reason and the verdict."""

import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--schemas", "8", "--theta", "1,1.3", "--ops", "ctrl,normalized", "--max-tokens", "96", "--no-chat"]


def main(gauge: str, f32_gguf: str) -> None:
    with tempfile.TemporaryDirectory() as out:
        cmd = [gauge, "json", "--model", f32_gguf, *FLAGS, "--out", out, "--json", "-t", "1"]
        summary = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        (raw,) = Path(out).glob("*/raw.jsonl")
        lines = [json.loads(x) for x in raw.read_text().splitlines() if x.strip()]
    outputs = [
        {k: line[k] for k in ("schema", "op", "theta", "tokens", "stop", "valid", "reason")}
        for line in sorted(lines, key=lambda x: (x["schema"], x["run"]))
    ]
    ref = {
        "about": "Reference A2 outputs on the default model's weights in float32 for "
        "python/tests/test_json_engines.py (the hf and vllm engines are checked against them; "
        "the test does not compute them).",
        "how": f"Measured {datetime.date.today()} by scripts/engines-json-reference.py: "
        "`gauge json --model SmolLM2-135M-Instruct.F32.gguf " + " ".join(FLAGS) + " --json -t 1` "
        "(the F32 GGUF made by scripts/gguf-to-f32.py from the registry's Q4_1 file; llama.cpp "
        "Release build on CPU). Plain prompts (--no-chat): `gauge json` wraps the prompt with "
        "llama.cpp's built-in chatml rendering, which leaves out SmolLM2's default system "
        "message that the HF Jinja template (used by the Python engines) adds, so only plain "
        "prompts are the same tokens on every stack.",
        "model": "smollm2-135m-instruct (SmolLM2-135M-Instruct.Q4_1.gguf dequantized to F32)",
        "flags": FLAGS,
        "conditions": [
            {k: c[k] for k in ("op", "theta", "n", "n_valid", "no_json", "parse_error", "schema_invalid")}
            for c in summary["conditions"]
        ],
        "outputs": outputs,
    }
    path = ROOT / "data" / "engines-json-reference.json"
    path.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(outputs)} outputs")


if __name__ == "__main__":
    main(*sys.argv[1:])
