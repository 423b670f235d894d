'use strict';
// Shared by the npm tests (not a test file: node --test runs *.test.js here).

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const REPO = path.resolve(__dirname, '../..');

/** True when `condition` holds; otherwise skips `t` with `reason`, or fails under CI=true. */
function need(t, condition, reason) {
  if (condition) return true;
  if (process.env.CI === 'true') assert.fail(`required under CI: ${reason}`);
  t.skip(reason);
  return false;
}

/** The crate's version, which every package carries. */
function cargoVersion() {
  const meta = JSON.parse(
    childProcess.execFileSync('cargo', ['metadata', '--no-deps', '--format-version', '1', '--locked'], {
      cwd: REPO,
      encoding: 'utf8',
    }),
  );
  return meta.packages.find((p) => p.name === 'undertaker-cli').version;
}

/** This machine's platform tarball and the main one, from target/npm (scripts/build-npm.sh). */
function tarballs() {
  const dir = path.join(REPO, 'target/npm');
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.tgz')) : [];
  const main = files.filter((f) => /^process-undertaker-\d/.test(f));
  // This machine's package only (linux-x64, not linux-x64-musl: see musl.test.js).
  const platform = files.filter((f) => new RegExp(`^process-undertaker-${process.platform}-${process.arch}-\\d`).test(f));
  assert.equal(main.length, 1, `one main tarball in target/npm (run scripts/build-npm.sh): ${files}`);
  assert.equal(platform.length, 1, `one ${process.platform}-${process.arch} tarball in target/npm: ${files}`);
  return [path.join(dir, platform[0]), path.join(dir, main[0])];
}

// Process accounting by a per-test environment token (UT_TEST_TOKEN), from /proc.

function environOf(pid) {
  try {
    const out = {};
    for (const item of fs.readFileSync(`/proc/${pid}/environ`).toString('utf8').split('\0')) {
      const i = item.indexOf('=');
      if (i > 0) out[item.slice(0, i)] = item.slice(i + 1);
    }
    return out;
  } catch (_) {
    return {};
  }
}

function stateOf(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch (_) {
    return 'gone';
  }
}

function ppidOf(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

function cmdline(pid) {
  return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
}

/** Live (non-zombie) processes carrying UT_TEST_TOKEN=token. */
function processesWith(token) {
  return fs
    .readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((pid) => environOf(pid).UT_TEST_TOKEN === token && !['Z', 'X', 'gone'].includes(stateOf(pid)));
}

function describe(pids) {
  return pids
    .map((pid) => {
      try {
        return `${pid} [${stateOf(pid)}] ${cmdline(pid).join(' ')}`;
      } catch (_) {
        return `${pid} gone`;
      }
    })
    .join('; ');
}

async function waitUntil(predicate, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (predicate()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}

module.exports = {
  REPO,
  need,
  cargoVersion,
  tarballs,
  environOf,
  stateOf,
  ppidOf,
  cmdline,
  processesWith,
  describe,
  waitUntil,
};
