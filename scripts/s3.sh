#!/usr/bin/env bash
# An S3 API server for tests, benchmarks and CI, with no Docker engine: s3proxy (org.gaul:s3proxy, a
# single jar from Maven Central, its filesystem backend), cached under .cache/s3proxy, bound to 127.0.0.1.
# s3proxy 4.x enforces `If-None-Match: *` on PutObject and CompleteMultipartUpload atomically, which the
# exactly-once sink relies on (test/s3.test.ts checks that it does).
#
#   scripts/s3.sh start    fetch (once), start in the background, wait until ready; prints the endpoint,
#                          the access key id and the secret key, one per line
#   scripts/s3.sh stop     stop the servers started here (by pid)
#   scripts/s3.sh status   print the endpoint if it runs, exit 1 if not
#   scripts/s3.sh reset    stop and delete the buckets
#
# A second, read-only server over the same buckets listens on S3_PORT+1 (tests of a refused write).
# Environment: S3_PORT (default 39300), TRAJFLOW_S3_DIR (default .cache/s3proxy: data, pids, logs).
# The credentials are generated once and kept in $dir/credentials (test credentials for a local server).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pidfile.sh
source scripts/pidfile.sh
root=$(pwd)
version=4.1.0
dir=${TRAJFLOW_S3_DIR:-$root/.cache/s3proxy}
port=${S3_PORT:-39300}
readonly_port=$((port + 1))
jar="$root/.cache/s3proxy/s3proxy-$version-jar-with-dependencies.jar"
data="$dir/data"

fetch() {
  [ -f "$jar" ] && return
  echo "s3: fetching s3proxy $version from Maven Central (once)..." >&2
  mkdir -p "$(dirname "$jar")"
  mvn -q -B dependency:copy -Dartifact="org.gaul:s3proxy:$version:jar:jar-with-dependencies" \
    -DoutputDirectory="$(dirname "$jar")" >&2
}

running() {
  pid_running "$dir/$1.pid"
}

credentials() {
  # The secret begins with '-', as 1 in 64 random ones do, so every test handing it to a program
  # checks that it is never read as an option (a Python reader's argparse once refused one).
  # (An older file without the '-' is replaced unless a server already runs with it.)
  if [ ! -f "$dir/credentials" ] || { [ "$(sed -n 2p "$dir/credentials" | cut -c1)" != "-" ] &&
    ! running server && ! running readonly; }; then
    mkdir -p "$dir"
    printf 'trajflow-%s\n-%s\n' "$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
      "$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')" > "$dir/credentials"
  fi
}

# One server: its name (pid and log file), port and extra properties.
launch() {
  local name=$1 at=$2 extra=$3
  running "$name" && return
  local identity credential
  identity=$(sed -n 1p "$dir/credentials")
  credential=$(sed -n 2p "$dir/credentials")
  cat > "$dir/$name.conf" <<CONF
s3proxy.endpoint=http://127.0.0.1:$at
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$identity
s3proxy.credential=$credential
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir=$data
$extra
CONF
  : > "$dir/$name.log"
  nohup java -Xms64m -Xmx512m -jar "$jar" --properties "$dir/$name.conf" >> "$dir/$name.log" 2>&1 &
  echo $! > "$dir/$name.pid"
}

ready() {
  local name=$1
  for _ in $(seq 1 120); do
    grep -q "Started ogsoejs.ServerConnector" "$dir/$name.log" && return
    if ! running "$name"; then
      echo "s3: s3proxy ($name) exited during start; its log:" >&2
      tail -20 "$dir/$name.log" >&2
      exit 1
    fi
    sleep 0.25
  done
  echo "s3: s3proxy ($name) did not become ready in 30 s; see $dir/$name.log" >&2
  exit 1
}

start() {
  command -v java >/dev/null || { echo "s3: java is not installed (s3proxy needs Java 17+)" >&2; exit 1; }
  fetch
  mkdir -p "$data"
  credentials
  launch server "$port" ""
  launch readonly "$readonly_port" "s3proxy.read-only-blobstore=true"
  ready server
  ready readonly
  echo "http://127.0.0.1:$port"
  sed -n 1,2p "$dir/credentials"
}

stop_one() {
  pid_stop "$dir/$1.pid" 10
}

case "${1:-}" in
  start) start ;;
  stop) stop_one server; stop_one readonly ;;
  reset) stop_one server; stop_one readonly; rm -rf "$data" ;;
  status)
    running server || { echo "s3: not running" >&2; exit 1; }
    echo "http://127.0.0.1:$port"
    ;;
  *)
    echo "usage: scripts/s3.sh start|stop|status|reset" >&2
    exit 2
    ;;
esac
