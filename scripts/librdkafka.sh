#!/usr/bin/env bash
# Builds the native addon of @confluentinc/kafka-javascript (librdkafka and its Node binding) in place, offline,
# for the Kafka source's `connection.client: librdkafka` (docs/kafka.md, "Client"). npm installs the package's
# files only (package.json's allowScripts denies its install script, which downloads a prebuilt binary from
# GitHub); this script compiles what it needs from what the machine has:
#   - librdkafka from the sources the package ships (deps/librdkafka, the version its package.json names):
#     Debian 12's librdkafka-dev is 2.0.2, and the binding calls functions added since (ListOffsets,
#     DescribeTopics, the consumer-group type and target assignment), so it cannot link against that one;
#     configured without downloading anything (no --install-deps), linking the system's zlib, OpenSSL and zstd
#     (Debian's zlib1g-dev, libssl-dev, libzstd-dev), with its builtin lz4 and snappy; no Kerberos (GSSAPI)
#     and no libcurl (OIDC), which trajflow's connection settings do not offer;
#   - the binding with node-gyp (npm's own copy) against the headers of the Node the project runs
#     (node_modules/node: the npm package `node` installs the whole distribution, include/node with it), so
#     node-gyp downloads nothing.
# librdkafka.so.1 and librdkafka++.so.1 are copied beside the addon (build/Release, found through its
# $ORIGIN run path). The result is cached under .cache/librdkafka/<package version>-abi<Node ABI>-<flags>, so
# after `npm ci` (which empties node_modules) a rebuild is a copy.
#
#   scripts/librdkafka.sh build    install missing Debian packages (as root), build (once) or restore, check it loads
#   scripts/librdkafka.sh status   print the addon's librdkafka version and features, exit 1 when it is not built
#
# Environment: NODE_GYP (node-gyp's bin/node-gyp.js; default npm's own), JOBS (parallel compiles, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
node="$root/node_modules/.bin/node"
pkg="$root/node_modules/@confluentinc/kafka-javascript"
addon="$pkg/build/Release/confluent-kafka-javascript.node"
jobs=${JOBS:-2}
# librdkafka's configure flags: anything missing fails the configure instead of being left out silently.
configure_flags=(--enable-zlib --enable-zstd --enable-ssl --disable-lz4-ext --disable-gssapi --disable-curl
  --disable-debug-symbols)
# What the addon must offer (the codecs trajflow's topics use, TLS, SCRAM).
features=(gzip snappy lz4 zstd ssl sasl_plain sasl_scram)
debian_packages=(make g++ pkg-config python3 zlib1g-dev libssl-dev libzstd-dev)

say() { echo "librdkafka: $*" >&2; }
fail() {
  say "$*"
  exit 1
}

[ -x "$node" ] || fail "no project Node at node_modules/.bin/node; run npm ci first"

# The addon's librdkafka version and features as one line, or nothing when it does not load.
probe() {
  "$node" -e '
    const k = require(process.argv[1]);
    const missing = process.argv.slice(2).filter((f) => !k.features.includes(f));
    if (missing.length > 0) { console.error("missing features: " + missing.join(",")); process.exit(1); }
    console.log(`librdkafka ${k.librdkafkaVersion} (${k.features.join(",")})`);
  ' "$pkg" "${features[@]}" 2>/dev/null
}

status() {
  [ -d "$pkg" ] || fail "@confluentinc/kafka-javascript is not installed (an optional dependency: npm ci installs it)"
  local line
  line=$(probe) || fail "the addon is not built here: run scripts/librdkafka.sh build"
  echo "$line"
}

# Installs what the build needs from Debian (as root), or names what is missing.
packages() {
  command -v dpkg-query >/dev/null || return 0 # not Debian: configure names what is missing
  local missing=()
  for p in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    fail "missing build packages: ${missing[*]} (install them: apt-get install ${missing[*]})"
  fi
  say "installing ${missing[*]} (apt-get)"
  apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
}

# The directory holding include/node for the project's Node: node_modules/node's distribution, else the same
# npm package fetched from the registry into the cache.
node_headers() {
  local version platform dir
  version=$("$node" -p 'process.version.slice(1)')
  platform=$("$node" -p '`${process.platform}-${process.arch}`')
  dir="$root/node_modules/node/node_modules/node-$platform"
  if [ -f "$dir/include/node/node_version.h" ] && [ "$(node_header_version "$dir")" = "$version" ]; then
    echo "$dir"
    return
  fi
  dir="$root/.cache/librdkafka/node-$platform-$version"
  if [ ! -f "$dir/include/node/node_version.h" ]; then
    say "node_modules/node holds no headers; fetching node-$platform@$version from the npm registry (once)"
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$dir" && npm pack --silent "node-$platform@$version" >/dev/null && tar -xzf ./*.tgz --strip-components=1 package/include && rm ./*.tgz)
  fi
  echo "$dir"
}

node_header_version() {
  awk '/#define NODE_(MAJOR|MINOR|PATCH)_VERSION/ { v = v (v == "" ? "" : ".") $3 } END { print v }' \
    "$1/include/node/node_version.h"
}

node_gyp() {
  if [ -n "${NODE_GYP:-}" ]; then
    echo "$NODE_GYP"
    return
  fi
  local npm_dir
  npm_dir=$(dirname "$(readlink -f "$(command -v npm)")")/..
  [ -f "$npm_dir/node_modules/node-gyp/bin/node-gyp.js" ] ||
    fail "node-gyp not found beside npm ($npm_dir); set NODE_GYP to its bin/node-gyp.js"
  echo "$npm_dir/node_modules/node-gyp/bin/node-gyp.js"
}

compile() {
  local src="$pkg/deps/librdkafka" nodedir gyp
  packages
  nodedir=$(node_headers)
  gyp=$(node_gyp)
  say "configuring librdkafka $(pkg_field librdkafka) (${configure_flags[*]})"
  (cd "$src" && ./configure "${configure_flags[@]}" >"$pkg/librdkafka-configure.log" 2>&1) ||
    { tail -20 "$pkg/librdkafka-configure.log" >&2; fail "configure failed; see $pkg/librdkafka-configure.log"; }
  say "compiling librdkafka ($jobs jobs; a few minutes on 2 cores)"
  make -C "$src" clean >/dev/null 2>&1 || true
  nice make -C "$src" -j"$jobs" libs >"$pkg/librdkafka-make.log" 2>&1 ||
    { tail -20 "$pkg/librdkafka-make.log" >&2; fail "make failed; see $pkg/librdkafka-make.log"; }
  say "compiling the binding with node-gyp against $nodedir"
  # BUILD_LIBRDKAFKA=0: the binding links the librdkafka built above (not its own gyp build, which runs make
  # with unbounded parallelism); -iquote puts its headers before any system librdkafka-dev's. A `nodedir`
  # in the user's npmrc reaches node-gyp as npm_config_nodedir under `npm test` and wins over --nodedir
  # (seen: the system Node 20's headers, an addon Node 24 refuses): it is unset here.
  (cd "$pkg" && unset npm_config_nodedir NPM_CONFIG_NODEDIR && BUILD_LIBRDKAFKA=0 \
    CPPFLAGS="-iquote $src/src -iquote $src/src-cpp" \
    LDFLAGS="-L$src/src -L$src/src-cpp -Wl,-rpath,'\$\$ORIGIN'" \
    nice "$node" "$gyp" rebuild --nodedir="$nodedir" -j "$jobs" >"$pkg/librdkafka-gyp.log" 2>&1) ||
    { tail -20 "$pkg/librdkafka-gyp.log" >&2; fail "node-gyp failed; see $pkg/librdkafka-gyp.log"; }
  cp -L "$src/src/librdkafka.so.1" "$src/src-cpp/librdkafka++.so.1" "$pkg/build/Release/"
}

pkg_field() {
  "$node" -p "require('$pkg/package.json').$1"
}

build() {
  [ -d "$pkg" ] || fail "@confluentinc/kafka-javascript is not installed (an optional dependency: npm ci installs it)"
  local line key cache
  if line=$(probe); then
    say "already built: $line"
    return
  fi
  key="$(pkg_field version)-abi$("$node" -p process.versions.modules)-$(echo "${configure_flags[*]}" | sha256sum | cut -c1-8)"
  cache="$root/.cache/librdkafka/$key"
  if [ -f "$cache/.complete" ]; then
    mkdir -p "$pkg/build/Release"
    cp "$cache"/*.node "$cache"/*.so.1 "$pkg/build/Release/"
    line=$(probe) || fail "the cached build in $cache does not load; delete it and build again"
    say "restored from $cache: $line"
    return
  fi
  compile
  line=$(probe) || fail "the built addon does not load or lacks features (${features[*]}); see $pkg/librdkafka-gyp.log"
  rm -rf "$cache" && mkdir -p "$cache"
  cp "$addon" "$pkg/build/Release/"*.so.1 "$cache/"
  touch "$cache/.complete"
  say "built $line; cached in $cache"
}

case "${1:-}" in
  build) build ;;
  status) status ;;
  *)
    echo "usage: scripts/librdkafka.sh build|status" >&2
    exit 2
    ;;
esac
