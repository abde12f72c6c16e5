# Sourced by the scripts that start servers (kafka, s3, llama, vllm, haproxy): each server is tracked by a pid file.

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

# Waits until the server in pid file $1 answers 200 at URL $2/health, up to $3 seconds, polling every quarter
# second; prints the base URL $2 once it does. Exits 1 with the tail of log $4 if the process dies first, or
# after the wait. $5 names the server in messages.
pid_wait_health() {
  local pidfile=$1 url=$2 seconds=$3 log=$4 name=$5
  for _ in $(seq 1 $((seconds * 4))); do
    if curl -fsS -o /dev/null "$url/health" 2>/dev/null; then
      echo "$url"
      return
    fi
    if ! pid_running "$pidfile"; then
      echo "$name exited during start; its log:" >&2
      tail -40 "$log" >&2
      exit 1
    fi
    sleep 0.25
  done
  echo "$name did not become ready in $seconds s; see $log" >&2
  exit 1
}
