#!/usr/bin/env bash
# mini-swe-agent (PyPI), the bash-only coding agent, in a virtual environment of its own under
# .cache/mini-swe-agent/<version> (it brings LiteLLM and its dependencies, ~750 MB, which the test
# environment does not need). The rollout tests run its `mini` CLI as an agent (python/tests/test_rollout.py).
# Idempotent: a complete environment of the same version is reused. Prints the path of `mini` as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.4.6
venv=.cache/mini-swe-agent/$version
stamp="$venv/.trajflow-ready"
if [ -f "$stamp" ] && "$venv/bin/mini" --help >/dev/null 2>&1; then
  echo "$(pwd)/$venv/bin/mini"
  exit 0
fi
rm -rf "$venv"
echo "mini-swe-agent: installing mini-swe-agent==$version from PyPI (once)..." >&2
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mini-swe-agent==$version" >&2
touch "$stamp"
echo "$(pwd)/$venv/bin/mini"
