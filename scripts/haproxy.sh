#!/usr/bin/env bash
# HAProxy in front of a fleet of gateway replicas, for tests, benchmarks and CI, with no Docker engine:
# Debian's haproxy package (and the two libraries it links that a minimal system may lack), fetched with
# `apt-get download` (no root needed to unpack it) and unpacked under .cache/haproxy; a haproxy already on
# PATH is used instead. Binds 127.0.0.1 only.
#
#   scripts/haproxy.sh install                 fetch and unpack (once); prints the binary's path
#   scripts/haproxy.sh start <port> <host:port>...
#                                              write the config (docs/gateway.md#a-fleet-of-replicas: the
#                                              session hashed consistently, /readyz checks, retry and
#                                              redispatch on connection failures and 503), start in the
#                                              background, wait until it listens; prints its URL
#   scripts/haproxy.sh stop                    stop the proxy started here (by pid)
#   scripts/haproxy.sh config <port> <host:port>...   print the config only
#
# Environment: TRAJFLOW_HAPROXY_DIR (default .cache/haproxy/run: config, pid, log and admin.sock, the stats
# socket; a second proxy needs its own), HAPROXY_CHECK_MS (health check interval, default 500).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pidfile.sh
source scripts/pidfile.sh
root=$(pwd)
cache="$root/.cache/haproxy"
dir=${TRAJFLOW_HAPROXY_DIR:-$cache/run}
check_ms=${HAPROXY_CHECK_MS:-500}
pidfile="$dir/haproxy.pid"
packages=(haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1)

# The haproxy binary, and the library path it needs (empty for a system one).
binary() {
  if command -v haproxy > /dev/null 2>&1; then
    command -v haproxy
  else
    echo "$cache/root/usr/sbin/haproxy"
  fi
}

libraries() {
  [ -d "$cache/root" ] || return 0
  find "$cache/root" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:
}

install() {
  if command -v haproxy > /dev/null 2>&1 || [ -x "$cache/root/usr/sbin/haproxy" ]; then
    binary
    return
  fi
  echo "haproxy: fetching Debian's package (once)..." >&2
  mkdir -p "$cache/debs"
  # A machine whose package lists were never fetched has nothing to download from: fetch them (root only).
  if ! (cd "$cache/debs" && apt-get download "${packages[@]}" > /dev/null 2>&1); then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq > /dev/null; fi
    (cd "$cache/debs" && apt-get download "${packages[@]}" > /dev/null)
  fi
  rm -rf "$cache/root.tmp"
  for deb in "$cache"/debs/*.deb; do dpkg -x "$deb" "$cache/root.tmp"; done
  mv "$cache/root.tmp" "$cache/root"
  LD_LIBRARY_PATH=$(libraries) "$cache/root/usr/sbin/haproxy" -v > /dev/null
  binary
}

config() {
  local port=$1
  shift
  cat << CFG
global
  maxconn 4096
  # Request bodies up to this size are kept, so a call refused with 503 (or never answered) can be sent again.
  tune.bufsize 1048576
  # Its own view of each replica (health, last check's status and duration): \`show stat\` on this socket.
  stats socket $dir/admin.sock mode 600 level operator

defaults
  mode http
  timeout connect 2s
  timeout client 10m
  timeout server 10m
  timeout http-request 30s
  # A health check's answer may take this long: without it HAProxy allows one check interval (500 ms), and
  # a replica whose event loop is busy for that long (a restart's catch-up on a loaded host) is taken out,
  # which loads the others more. A replica that is gone is refused at once and still found down in ~1 s.
  timeout check 2s
  # A call is sent again, to the session's replica or (last try) another, when the replica could not be
  # reached, closed without answering, or answered 503 (session_moved, output_unavailable): before any of
  # these nothing reached the agent.
  retries 3
  retry-on conn-failure empty-response 503
  option redispatch 1
  # An agent that gives up on a call: the replica sees it leave and makes nothing of the call.
  option abortonclose

frontend agents
  bind 127.0.0.1:$port
  default_backend gateways

backend gateways
  # The session: the path's id (/sessions/{id}/v1/...), else X-Session-Id, else the session key.
  http-request set-var(txn.session) path,field(3,/) if { path_beg /sessions/ }
  http-request set-var(txn.session) req.hdr(x-session-id) if !{ var(txn.session) -m found } { req.hdr(x-session-id) -m found }
  http-request set-var(txn.session) req.hdr(authorization) if !{ var(txn.session) -m found } { req.hdr(authorization) -m found }
  http-request set-var(txn.session) req.hdr(x-api-key) if !{ var(txn.session) -m found }
  balance hash var(txn.session)
  hash-type consistent
  option httpchk GET /readyz
  http-check expect status 200
  default-server inter ${check_ms}ms fastinter ${check_ms}ms downinter ${check_ms}ms fall 2 rise 1
CFG
  local i=0
  for server in "$@"; do
    i=$((i + 1))
    echo "  server g$i $server check"
  done
}

case "${1:-}" in
  install) install ;;
  config)
    shift
    config "$@"
    ;;
  start)
    shift
    port=$1
    [ $# -ge 2 ] || { echo "usage: scripts/haproxy.sh start <port> <host:port>..." >&2; exit 2; }
    bin=$(install)
    mkdir -p "$dir"
    pid_stop "$pidfile" 5
    config "$@" > "$dir/haproxy.cfg"
    LD_LIBRARY_PATH=$(libraries) "$bin" -c -q -f "$dir/haproxy.cfg" >&2
    LD_LIBRARY_PATH=$(libraries) nohup "$bin" -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
      if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
        echo "http://127.0.0.1:$port"
        exit 0
      fi
      pid_running "$pidfile" || break
      sleep 0.1
    done
    echo "haproxy did not start; its log:" >&2
    cat "$dir/haproxy.log" >&2
    exit 1
    ;;
  stop) pid_stop "$pidfile" 5 ;;
  *)
    echo "usage: scripts/haproxy.sh install | start <port> <host:port>... | stop | config <port> <host:port>..." >&2
    exit 2
    ;;
esac
