# Sourced by scripts/kafka.sh, scripts/s3.sh and scripts/llama.sh: the servers they start are tracked by a pid file.

# Whether the process in pid file $1 is alive.
pid_running() {
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Stops the process in pid file $1: SIGTERM, up to $2 seconds for it to exit, then SIGKILL; removes the file.
pid_stop() {
  if pid_running "$1"; then
    local pid
    pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 1 $(($2 * 4))); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
