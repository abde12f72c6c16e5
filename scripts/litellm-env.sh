#!/usr/bin/env bash
# Creates .cache/litellm, a virtual environment holding LiteLLM's proxy (PyPI's litellm[proxy], pinned),
# the peer `npm run bench:gateway` measures beside trajflow's gateway. Kept apart from .cache/python so its
# many pinned dependencies cannot move the readers the tests use. Idempotent: a complete environment is
# reused. Prints the litellm executable's path last. Pinned to 1.106.12: from 1.110 the proxy extra needs the
# litellm-proxy package, and from 1.108 a litellm-proxy-extras, that the package index here does not have.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/litellm
want="litellm[proxy]==1.106.12"
stamp="$venv/.trajflow-ready"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv/bin/litellm"
  exit 0
fi
python=${PYTHON:-python3}
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$want" >&2
printf '%s' "$want" >"$stamp"
echo "litellm environment ready: $venv ($("$venv/bin/litellm" --version 2>/dev/null | tail -1))" >&2
echo "$venv/bin/litellm"
