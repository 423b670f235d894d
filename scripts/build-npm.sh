#!/usr/bin/env bash
# Builds the npm tarballs into target/npm/: process-undertaker (JavaScript, types, no
# install script) and process-undertaker-<platform> (the binary) for each platform in
# $NPM_PLATFORMS (default: this machine's, linux-x64; linux-x64-musl is the static musl
# build for Alpine, from target/x86_64-unknown-linux-musl/release). The version is the
# crate's.
# A platform's binary comes from target/<rust target>/release (or target/release for
# this machine); build it first (scripts/build-wheel.sh or cargo build --release).
# linux-x64 takes the static musl build as well when it is fresh (scripts/build-musl.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(cargo metadata --no-deps --format-version 1 --locked |
  node -e 'const m=JSON.parse(require("fs").readFileSync(0));process.stdout.write(m.packages.find(p=>p.name==="undertaker-cli").version)')
host_platform=$(node -p 'process.platform + "-" + process.arch')
platforms=${NPM_PLATFORMS:-$host_platform}

# True when $1 is built and no source is newer.
fresh() { [ -x "$1" ] && [ -z "$(find crates Cargo.lock -newer "$1" -print -quit)" ]; }

binary_for() { # npm platform -> path of its release binary
  local triple musl=target/x86_64-unknown-linux-musl/release/undertaker
  case "$1" in
    # glibc systems get the static musl build too (it runs there unchanged): an idle
    # guarded tree costs less than half the memory of the glibc build's
    # (docs/BENCHMARKS.md, "Memory per tree"). Without it (scripts/build-musl.sh not
    # run, or its toolchain missing) linux-x64 is the glibc build.
    linux-x64)
      if fresh "$musl"; then echo "$musl"; return; fi
      echo "linux-x64: the glibc build (no fresh $musl)" >&2 ;;
  esac
  case "$1" in
    "$host_platform") echo target/release/undertaker; return ;;
    linux-x64) triple=x86_64-unknown-linux-gnu ;;
    linux-x64-musl) triple=x86_64-unknown-linux-musl ;;
    # The release's static musl build (scripts/build-musl.sh on an arm64 runner).
    linux-arm64) triple=aarch64-unknown-linux-musl ;;
    # Built by the release workflow's runners (docs/RELEASE.md), not on this machine.
    darwin-arm64) triple=aarch64-apple-darwin ;;
    darwin-x64) triple=x86_64-apple-darwin ;;
    win32-x64) echo target/x86_64-pc-windows-msvc/release/undertaker.exe; return ;;
    *) echo "no Rust target known for $1" >&2; return 1 ;;
  esac
  echo "target/$triple/release/undertaker"
}

if [ ! -x target/release/undertaker ] || [ -n "$(find crates Cargo.lock -newer target/release/undertaker -print -quit)" ]; then
  cargo build --release --locked -p undertaker-cli
fi

stage=target/npm/stage
rm -rf "$stage" target/npm/*.tgz
mkdir -p "$stage"
optional="{}"
for platform in $platforms; do
  bin=$(binary_for "$platform")
  [ -x "$bin" ] || { echo "missing $bin for $platform" >&2; exit 1; }
  # <os>-<cpu>[-<libc>]: linux-x64 is glibc's, linux-x64-musl musl's (Alpine).
  IFS=- read -r os cpu libc <<<"$platform"
  dir="$stage/process-undertaker-$platform"
  mkdir -p "$dir/bin"
  sed -e "s/@PLATFORM@/$platform/g" -e "s/@VERSION@/$version/" -e "s/@OS@/$os/" -e "s/@CPU@/$cpu/" \
    -e "s/@LIBC@/${libc:-glibc}/" npm/platform/package.json.in > "$dir/package.json"
  [ "$os" = linux ] || sed -i '/"libc"/d' "$dir/package.json"
  install -m 0755 "$bin" "$dir/bin/$(basename "$bin")"
  printf '# process-undertaker-%s\n\nThe `undertaker` binary for %s, installed by the `process-undertaker` package\nthrough its optionalDependencies. Use `process-undertaker` instead.\n' \
    "$platform" "$platform" > "$dir/README.md"
  optional=$(node -e 'const o=JSON.parse(process.argv[1]);o[process.argv[2]]=process.argv[3];process.stdout.write(JSON.stringify(o))' \
    "$optional" "process-undertaker-$platform" "$version")
done

main="$stage/process-undertaker"
cp -r npm/process-undertaker "$main"
node -e '
  const fs = require("fs"); const f = process.argv[1];
  const p = JSON.parse(fs.readFileSync(f));
  p.version = process.argv[2]; p.optionalDependencies = JSON.parse(process.argv[3]);
  fs.writeFileSync(f, JSON.stringify(p, null, 2) + "\n");' "$main/package.json" "$version" "$optional"

for dir in "$stage"/*/; do
  (cd "$dir" && npm pack --silent --pack-destination "$OLDPWD/target/npm" >/dev/null)
done
ls -1 target/npm/*.tgz
# How to install them: from the project that uses them (not this checkout, where npm
# would write package.json and node_modules/), the main package and this machine's
# platform package only (another platform's is refused with EBADPLATFORM).
echo "to install into a Node project: cd YOUR_PROJECT && npm install $PWD/target/npm/process-undertaker-$version.tgz $PWD/target/npm/process-undertaker-$host_platform-$version.tgz" >&2
