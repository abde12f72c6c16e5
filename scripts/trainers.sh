#!/usr/bin/env bash
# The trainers' own packages from PyPI, each in a virtual environment of its own (their pins conflict:
# verl 0.9.1 wants transformers >=5.5.3, AReaL 1.0.4 <=5.3.0 and torch <2.11), for the integration tests
# (python/tests/trainers, docs/trainers.md) and for trying the adapters by hand. Both run on torch 2.13.0, as
# vLLM's and the project's environments do, so its ~4.5 GB sits once in scripts/uv.sh's store.
#
#   scripts/trainers.sh verl     .cache/trainers/verl-<hash>: verl, TransferQueue, Ray (scripts/trainers/verl.txt)
#   scripts/trainers.sh areal    .cache/trainers/areal-<hash>: AReaL 1.0.4 (scripts/trainers/areal.txt)
#
# Each installs once and is reused while its requirements file is unchanged (the directory is named by the
# file's hash, so a changed file builds beside the old one); the trajflow package goes in editable. Prints the
# environment's python last.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:?usage: scripts/trainers.sh verl|areal}
requirements="scripts/trainers/$which.txt"
[ -f "$requirements" ] || { echo "trainers: no $requirements (verl or areal)" >&2; exit 2; }
hash=$(cat "$requirements" python/pyproject.toml | sha256sum | cut -c1-12)
venv=".cache/trainers/$which-$hash"
py="$venv/bin/python"
if [ ! -f "$venv/.trajflow-ready" ]; then
  echo "trainers: installing $which into $venv (once; minutes)..." >&2
  started=$(date +%s)
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  # uv, not pip: its store shares torch's files with the other environments (scripts/uv.sh says why).
  pip=(bash scripts/uv.sh pip install --quiet --python "$py")
  "${pip[@]}" -r "$requirements" >&2
  if [ "$which" = areal ]; then
    # AReaL's own metadata pulls in whole agent frameworks; it goes in alone, and what its workflow API and
    # data utilities import comes from areal.txt.
    "${pip[@]}" --no-deps areal==1.0.4 >&2
  fi
  "${pip[@]}" --no-deps -e python >&2
  echo "trainers: $which ready in $(($(date +%s) - started)) s, $(du -sh "$venv" | cut -f1) (counting the files it shares through scripts/uv.sh's store)" >&2
  touch "$venv/.trajflow-ready"
fi
echo "$(pwd)/$py"
