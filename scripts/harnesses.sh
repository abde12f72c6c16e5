#!/usr/bin/env bash
# The agent harnesses the gateway's end-to-end tests drive (test/gateway-harnesses.test.ts), installed from
# the npm registry into .cache/harnesses: Claude Code and Codex CLI, pinned. Both ship their native binary in
# a platform package (an optional dependency); Claude Code's install script links it into place. Idempotent:
# a complete install of the same versions is reused. Prints the bin directory as its last line.
#
# The Python harnesses (the anthropic and openai SDKs, the OpenAI Agents SDK) come from PyPI with the test
# environment (scripts/python-requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cache/harnesses
packages=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0")
stamp="$dir/.trajflow-ready"
ready() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${packages[*]}" ] &&
    "$dir/node_modules/.bin/claude" --version >/dev/null 2>&1 &&
    "$dir/node_modules/.bin/codex" --version >/dev/null 2>&1
}
if ready; then
  echo "$(pwd)/$dir/node_modules/.bin"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
printf '{ "name": "trajflow-test-harnesses", "private": true }\n' >"$dir/package.json"
echo "harnesses: installing ${packages[*]} from the npm registry (once)..." >&2
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${packages[@]}" >&2
# An npm that skipped the install script leaves Claude Code's placeholder: run the script itself.
if ! "$dir/node_modules/.bin/claude" --version >/dev/null 2>&1; then
  (cd "$dir/node_modules/@anthropic-ai/claude-code" && node install.cjs) >&2
fi
"$dir/node_modules/.bin/claude" --version >&2
"$dir/node_modules/.bin/codex" --version >&2
printf '%s' "${packages[*]}" >"$stamp"
echo "$(pwd)/$dir/node_modules/.bin"
