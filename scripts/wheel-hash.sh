# Sourced (bash): `wheel_hash` prints the hash of what the gauge-sampling wheel is built from:
# gauge-py and the workspace crates it links (sources, manifests, the Python package), plus the
# lock file. scripts/setup-python.sh stamps the venv's wheel with it; scripts/gpu-check-offline.sh
# stamps the carried wheel and checks it on the GPU machine.
wheel_hash() {
  find crates/gauge-py crates/gauge-sampling crates/gauge-lab crates/gauge-engine crates/gauge-grammar \
    \( -name target -o -name __pycache__ -o -name tests -o -name benches \) -prune -o -type f \
    \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name '*.toml' -o -name '*.typed' \) -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | cat - Cargo.lock Cargo.toml | sha256sum | cut -d' ' -f1
}
