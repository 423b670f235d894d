#!/usr/bin/env bash
# Fails unless every version the release ships agrees with the crate's (the workspace
# Cargo.toml): the undertaker crates, the Python package (pyproject.toml takes its
# version from Cargo.toml: `dynamic = ["version"]`), and, when they were built, the
# wheel in target/wheels, the npm tarballs in target/npm (their package.json and
# optionalDependencies pins) and the binary's --version. See docs/RELEASE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the built artifacts are looked for (a test points it at a scratch copy).
artifacts=${CHECK_VERSIONS_ARTIFACTS:-target}
fail=0
say() { echo "check-versions: $*"; }
bad() { say "MISMATCH: $*"; fail=1; }

want=$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="undertaker-cli"))')
say "crate version $want"
cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys
want=sys.argv[1]
bad=[p["name"]+" "+p["version"] for p in json.load(sys.stdin)["packages"] if p["version"]!=want]
print("\n".join(bad)); sys.exit(1 if bad else 0)' "$want" >/tmp/check-versions.$$ || bad "crates: $(cat /tmp/check-versions.$$)"
rm -f /tmp/check-versions.$$
grep -q "^undertaker = { path = \"crates/undertaker\", version = \"=$want\" }" Cargo.toml ||
  bad "Cargo.toml's [workspace.dependencies] undertaker must pin version \"=$want\" (cargo publish needs it)"
grep -q '^dynamic = \["version"\]' pyproject.toml || bad "pyproject.toml must take its version from Cargo.toml (dynamic = [\"version\"])"
grep -q '^version' pyproject.toml && bad "pyproject.toml sets a version of its own"

shopt -s nullglob
for whl in "$artifacts"/wheels/undertaker-*.whl; do
  case "$(basename "$whl")" in undertaker-"$want"-*) say "ok $whl" ;; *) bad "$whl" ;; esac
done
check_npm='
import json, sys
want, name = sys.argv[1], sys.argv[2]
p = json.load(sys.stdin)
errs = [] if p["version"] == want else ["%s is %s" % (p["name"], p["version"])]
errs += ["%s pins %s@%s" % (p["name"], k, v) for k, v in p.get("optionalDependencies", {}).items() if v != want]
print("check-versions: " + ("MISMATCH: " + "; ".join(errs) if errs else "ok " + name))
sys.exit(1 if errs else 0)'
for tgz in "$artifacts"/npm/*.tgz; do
  tar -xzOf "$tgz" package/package.json | python3 -c "$check_npm" "$want" "$tgz" || fail=1
done
if [ -x "$artifacts/release/undertaker" ]; then
  got=$("$artifacts/release/undertaker" --version)
  [ "$got" = "undertaker $want" ] && say "ok $artifacts/release/undertaker" || bad "binary says '$got'"
fi
exit $fail
