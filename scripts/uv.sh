#!/usr/bin/env bash
# uv (PyPI's `uv`, pinned) for the heavy Python environments: vLLM's (scripts/vllm.sh) and the trainers'
# (scripts/trainers.sh). Each package uv installs is unpacked once into one store, .cache/uv/store, and every
# environment hard-links its files from there. So torch 2.13.0 with its CUDA libraries (~4 GB, which the
# vLLM, verl and AReaL environments all run on) takes disk once instead of three times, and no second copy
# of each wheel sits in pip's download cache. CI's first run on a bare machine ran out of disk with pip:
# three environments of 5.7-7.9 GB each plus pip's cache of the same wheels.
#
#   scripts/uv.sh                  install uv (once) and print its path
#   scripts/uv.sh pip ARGS...      run `uv pip ARGS...` with the project's store and link mode
#
# The store must be on the environments' filesystem for hard links (.cache is); elsewhere uv copies, and
# says so. Deleting an environment leaves its files in the store; `rm -rf .cache/uv/store` (or
# `scripts/uv.sh cache prune`) frees what no environment links any more.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.13.9
tool=".cache/uv/tool-$version"
uv="$(pwd)/$tool/bin/uv"
if [ ! -x "$uv" ]; then
  echo "uv: installing uv $version into $tool (once)..." >&2
  rm -rf "$tool"
  "${PYTHON:-python3}" -m venv "$tool"
  "$tool/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "uv==$version" >&2
fi
export UV_CACHE_DIR="$(pwd)/.cache/uv/store" UV_LINK_MODE=hardlink UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never
if [ $# -eq 0 ]; then
  echo "$uv"
else
  exec "$uv" "$@"
fi
