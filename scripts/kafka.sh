#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft) for tests and CI, with no Docker engine: the broker comes from
# Maven Central (scripts/kafka/pom.xml), is cached under .cache/kafka, and binds 127.0.0.1 only.
#
#   scripts/kafka.sh start     fetch (once), configure, format, start in the background, wait until ready
#   scripts/kafka.sh stop      stop the broker started here (by pid)
#   scripts/kafka.sh status    print the bootstrap address if it runs, exit 1 if not
#   scripts/kafka.sh restart   stop then start, keeping the data (for broker-restart tests)
#   scripts/kafka.sh reset     stop and delete the data
#   scripts/kafka.sh secure    print the secure listener's settings (address, CA file, user, password)
#   scripts/kafka.sh quota <client-id> <bytes/s>   throttle that client's fetches (tests of a starved consumer)
#
# The broker has a second, secure listener on KAFKA_PORT+2: SASL_SSL with SCRAM-SHA-512, its certificate
# signed by a CA made here (keytool, under $dir/tls). User `trajflow`, a password generated once and kept
# in $dir/tls/password (test credentials for a local broker, never for anything else).
#
# Environment: KAFKA_PORT (default 39092; the controller listens on KAFKA_PORT+1, SASL_SSL on +2),
# TRAJFLOW_KAFKA_DIR (default .cache/kafka: data, pid and log; a second broker needs its own dir and port).
# The broker's jars are always cached in .cache/kafka/libs, shared by every instance.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pidfile.sh
source scripts/pidfile.sh
root=$(pwd)
dir=${TRAJFLOW_KAFKA_DIR:-$root/.cache/kafka}
port=${KAFKA_PORT:-39092}
controller=$((port + 1))
secure=$((port + 2))
libs="$root/.cache/kafka/libs"
data="$dir/data"
pidfile="$dir/broker.pid"
log="$dir/broker.log"
props="$dir/server.properties"
tls="$dir/tls"

fetch() {
  if [ -f "$libs/.complete" ] && cmp -s "$libs/.complete" scripts/kafka/pom.xml; then return; fi
  echo "kafka: fetching the broker from Maven Central (once)..." >&2
  rm -rf "$libs"
  mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
  cp scripts/kafka/pom.xml "$libs/.complete"
}

running() {
  pid_running "$pidfile"
}

# A CA and a broker certificate for 127.0.0.1 and localhost signed by it (PKCS12 keystores, made once).
certificates() {
  if [ -f "$tls/broker.p12" ] && [ -f "$tls/ca.pem" ] && [ -f "$tls/password" ]; then return; fi
  rm -rf "$tls"
  mkdir -p "$tls"
  head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$tls/password"
  local pass
  pass=$(cat "$tls/password")
  local kt=(keytool -storetype PKCS12 -storepass "$pass" -keypass "$pass")
  "${kt[@]}" -genkeypair -alias ca -keyalg RSA -keysize 2048 -validity 3650 -dname "CN=trajflow test CA" \
    -ext bc:c -keystore "$tls/ca.p12" >/dev/null 2>&1
  "${kt[@]}" -exportcert -rfc -alias ca -keystore "$tls/ca.p12" -file "$tls/ca.pem" >/dev/null 2>&1
  "${kt[@]}" -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 -dname "CN=localhost" \
    -ext SAN=ip:127.0.0.1,dns:localhost -keystore "$tls/broker.p12" >/dev/null 2>&1
  "${kt[@]}" -certreq -alias broker -keystore "$tls/broker.p12" -file "$tls/broker.csr" >/dev/null 2>&1
  "${kt[@]}" -gencert -alias ca -keystore "$tls/ca.p12" -infile "$tls/broker.csr" -outfile "$tls/broker.pem" \
    -rfc -validity 3650 -ext SAN=ip:127.0.0.1,dns:localhost >/dev/null 2>&1
  "${kt[@]}" -importcert -noprompt -alias ca -file "$tls/ca.pem" -keystore "$tls/broker.p12" >/dev/null 2>&1
  "${kt[@]}" -importcert -noprompt -alias broker -file "$tls/broker.pem" -keystore "$tls/broker.p12" >/dev/null 2>&1
}

configure() {
  mkdir -p "$data"
  certificates
  local pass
  pass=$(cat "$tls/password")
  cat > "$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller,SASL_SSL://127.0.0.1:$secure
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$secure
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls/broker.p12
ssl.keystore.password=$pass
ssl.key.password=$pass
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
# Client quotas (scripts/kafka.sh quota) measured over 2 s instead of 11: a throttled test client is
# throttled after a small burst, not after 11 seconds' worth of its rate.
quota.window.num=2
quota.window.size.seconds=1
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
  # The listener ports lie in Linux's ephemeral range: a client's outgoing connection can hold one for a
  # moment (seen once in CI: "Address already in use" on the SASL_SSL port). Such a start is tried again.
  for attempt in 1 2 3 4 5; do
    : > "$log"
    nohup java "${jvm[@]}" kafka.Kafka "$props" >> "$log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 240); do
      if grep -q "Kafka Server started" "$log"; then
        scram_user
        echo "127.0.0.1:$port"
        return
      fi
      if ! running; then
        if [ "$attempt" -lt 5 ] && grep -q "Address already in use" "$log"; then
          sleep 2
          continue 2
        fi
        echo "kafka: the broker exited during start; its log:" >&2
        tail -40 "$log" >&2
        exit 1
      fi
      sleep 0.5
    done
    break
  done
  echo "kafka: the broker did not become ready in 120 s; see $log" >&2
  exit 1
}

# The SCRAM user of the secure listener (idempotent: setting the same password again changes nothing).
scram_user() {
  java -cp "$libs/*" -Dlog4j2.configurationFile="$dir/log4j2.properties" kafka.admin.ConfigCommand \
    --bootstrap-server "127.0.0.1:$port" --alter --entity-type users --entity-name trajflow \
    --add-config "SCRAM-SHA-512=[iterations=4096,password=$(cat "$tls/password")]" >/dev/null
}

# A broker-enforced fetch quota for one client id: its fetch responses are delayed to this byte rate.
quota() {
  java -cp "$libs/*" -Dlog4j2.configurationFile="$dir/log4j2.properties" kafka.admin.ConfigCommand \
    --bootstrap-server "127.0.0.1:$port" --alter --entity-type clients --entity-name "$1" \
    --add-config "consumer_byte_rate=$2" >/dev/null
}

stop() {
  pid_stop "$pidfile" 30
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  reset) stop; rm -rf "$data" ;;
  secure)
    running || { echo "kafka: not running" >&2; exit 1; }
    printf '127.0.0.1:%s\n%s\ntrajflow\n%s\n' "$secure" "$tls/ca.pem" "$(cat "$tls/password")"
    ;;
  quota)
    running || { echo "kafka: not running" >&2; exit 1; }
    [ $# -eq 3 ] || { echo "usage: scripts/kafka.sh quota <client-id> <bytes-per-second>" >&2; exit 2; }
    quota "$2" "$3"
    ;;
  status)
    if running; then echo "127.0.0.1:$port"; else echo "kafka: not running" >&2; exit 1; fi
    ;;
  *)
    echo "usage: scripts/kafka.sh start|stop|status|restart|reset|secure|quota" >&2
    exit 2
    ;;
esac
