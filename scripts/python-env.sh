#!/usr/bin/env bash
# Creates .cache/python, a virtual environment with the independent readers the tests use to check
# trajflow's output (pyarrow, DuckDB), pytest, torch and onnx for the reward server the reward tests score
# against (test/fixtures/reward_server.py; PyPI's torch brings CUDA's libraries, ~5 GB, and runs on CPU where
# there is no GPU; 2.13.0, the release vLLM's and the trainers' environments run on, so that scripts/uv.sh's
# store holds it once for all four), gguf for the tiny llama.cpp test model (scripts/tiny_llm.py), and the trajflow
# Python package (python/, installed editable), and the agent SDKs the gateway's harness tests drive (anthropic,
# openai, openai-agents), from PyPI.
# Idempotent: a complete environment is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/python
stamp="$venv/.trajflow-ready"
requirements=scripts/python-requirements.txt
want=$(cat "$requirements" python/pyproject.toml)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python=${PYTHON:-python3}
rm -rf "$venv"
"$python" -m venv "$venv"
pip=(bash scripts/uv.sh pip install --quiet --python "$venv/bin/python")
"${pip[@]}" -r "$requirements"
"${pip[@]}" --no-deps -e python
printf '%s' "$want" >"$stamp"
echo "python environment ready: $venv ($("$venv/bin/python" -c 'import pyarrow, duckdb; print("pyarrow", pyarrow.__version__, "duckdb", duckdb.__version__)'))"
