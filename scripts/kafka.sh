#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft) for tests and CI, with no Docker engine: the broker comes from
# Maven Central (scripts/kafka/pom.xml), is cached under .cache/kafka, and binds 127.0.0.1 only.
#
#   scripts/kafka.sh start     fetch (once), configure, format, start in the background, wait until ready
#   scripts/kafka.sh stop      stop the broker started here (by pid)
#   scripts/kafka.sh status    print the bootstrap address if it runs, exit 1 if not
#   scripts/kafka.sh restart   stop then start, keeping the data (for broker-restart tests)
#   scripts/kafka.sh reset     stop and delete the data
#
# Environment: KAFKA_PORT (default 39092; the controller listens on KAFKA_PORT+1),
# TRAJFLOW_KAFKA_DIR (default .cache/kafka: data, pid and log; a second broker needs its own dir and port).
# The broker's jars are always cached in .cache/kafka/libs, shared by every instance.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${TRAJFLOW_KAFKA_DIR:-$root/.cache/kafka}
port=${KAFKA_PORT:-39092}
controller=$((port + 1))
libs="$root/.cache/kafka/libs"
data="$dir/data"
pidfile="$dir/broker.pid"
log="$dir/broker.log"
props="$dir/server.properties"

fetch() {
  if [ -f "$libs/.complete" ] && cmp -s "$libs/.complete" scripts/kafka/pom.xml; then return; fi
  echo "kafka: fetching the broker from Maven Central (once)..." >&2
  rm -rf "$libs"
  mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
  cp scripts/kafka/pom.xml "$libs/.complete"
}

running() {
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

configure() {
  mkdir -p "$data"
  cat > "$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data
num.partitions=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=true
log.retention.hours=24
PROPS
  cat > "$dir/log4j2.properties" <<'LOG'
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka.server.KafkaServer
logger.kafka.level = info
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
LOG
}

start() {
  if running; then
    echo "127.0.0.1:$port"
    return
  fi
  command -v java >/dev/null || { echo "kafka: java is not installed (Kafka 4 needs Java 17+)" >&2; exit 1; }
  fetch
  configure
  local cp="$libs/*"
  local jvm=(-Xms256m -Xmx1g -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$cp")
  if [ ! -f "$data/meta.properties" ]; then
    # A cluster id is a base64url-encoded 16-byte UUID. One starting with "-" would be read as an option
    # by the storage tool (Kafka's own Uuid.randomUuid() skips those too), so draw until it does not.
    local id="-"
    while [ "${id:0:1}" = "-" ]; do
      id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    java "${jvm[@]}" kafka.tools.StorageTool format -t "$id" -c "$props" >/dev/null
  fi
  : > "$log"
  nohup java "${jvm[@]}" kafka.Kafka "$props" >> "$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 240); do
    if grep -q "Kafka Server started" "$log"; then
      echo "127.0.0.1:$port"
      return
    fi
    if ! running; then
      echo "kafka: the broker exited during start; its log:" >&2
      tail -40 "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "kafka: the broker did not become ready in 120 s; see $log" >&2
  exit 1
}

stop() {
  if running; then
    local pid
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  reset) stop; rm -rf "$data" ;;
  status)
    if running; then echo "127.0.0.1:$port"; else echo "kafka: not running" >&2; exit 1; fi
    ;;
  *)
    echo "usage: scripts/kafka.sh start|stop|status|restart|reset" >&2
    exit 2
    ;;
esac
