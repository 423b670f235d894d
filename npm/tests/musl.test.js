'use strict';
// The linux-x64-musl platform package (scripts/build-npm.sh with NPM_PLATFORMS holding
// linux-x64-musl, as .ci/run builds it): a musl manifest, a static binary (it runs on
// Alpine and on glibc alike) that guards a tree, and the main package picks it on musl.
// Without the tarball the test skips with a reason locally and FAILS under CI=true.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { REPO, need, cargoVersion } = require('./support');

const NPM_DIR = path.join(REPO, 'target/npm');

/** Whether an ELF file asks for a program interpreter (PT_INTERP): not static. */
function hasInterpreter(file) {
  const b = fs.readFileSync(file);
  assert.equal(b.toString('latin1', 1, 4), 'ELF');
  assert.equal(b[4], 2, 'a 64-bit ELF');
  const phoff = Number(b.readBigUInt64LE(0x20));
  const phentsize = b.readUInt16LE(0x36);
  const phnum = b.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i++) {
    if (b.readUInt32LE(phoff + i * phentsize) === 3) return true;
  }
  return false;
}

test('linux-x64-musl package: musl manifest, static binary, guards a tree', (t) => {
  if (process.platform !== 'linux' || process.arch !== 'x64') return t.skip('linux-x64 only');
  const version = cargoVersion();
  const tarball = path.join(NPM_DIR, `process-undertaker-linux-x64-musl-${version}.tgz`);
  // .ci/run sets this when scripts/build-musl.sh could not install the musl toolchain.
  const unavailable = process.env.UNDERTAKER_NPM_MUSL_SKIPPED;
  if (!fs.existsSync(tarball) && unavailable) return t.skip(unavailable);
  if (!need(t, fs.existsSync(tarball), `${tarball} not built (scripts/build-musl.sh, then NPM_PLATFORMS="linux-x64 linux-x64-musl" scripts/build-npm.sh)`)) return;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ut-musl-'));
  try {
    childProcess.execFileSync('tar', ['-xzf', tarball, '-C', dir]);
    const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package/package.json'), 'utf8'));
    assert.equal(manifest.name, 'process-undertaker-linux-x64-musl');
    assert.equal(manifest.version, version);
    assert.deepEqual([manifest.os, manifest.cpu, manifest.libc], [['linux'], ['x64'], ['musl']]);
    const bin = path.join(dir, 'package/bin/undertaker');
    assert.equal(hasInterpreter(bin), false, 'the musl binary is static');
    assert.equal(childProcess.execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim(), `undertaker ${version}`);
    // A tree with a setsid daemon: gone when the command returns.
    const state = path.join(dir, 'state');
    const out = childProcess.execFileSync(
      bin,
      ['--state-dir', state, 'run', '--grace', '300ms', '--', 'sh', '-c', 'setsid sleep 1000 & echo $!'],
      { encoding: 'utf8' },
    );
    const daemon = Number(out.trim());
    assert.ok(daemon > 0, out);
    let alive = true;
    try {
      const stat = fs.readFileSync(`/proc/${daemon}/stat`, 'utf8');
      alive = !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2)[0]);
    } catch (_) {
      alive = false;
    }
    assert.equal(alive, false, `the setsid daemon ${daemon} outlived undertaker run`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the main package picks the musl build on musl, and falls back to it on glibc', () => {
  const { platformPackages } = require(path.join(REPO, 'npm/process-undertaker'));
  const base = `process-undertaker-${process.platform}-${process.arch}`;
  if (process.platform !== 'linux') {
    assert.deepEqual(platformPackages(true), [base]);
    return;
  }
  assert.deepEqual(platformPackages(true), [`${base}-musl`]);
  assert.deepEqual(platformPackages(false), [base, `${base}-musl`]);
});
