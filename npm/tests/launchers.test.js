'use strict';
// Zero-install launchers between a host and undertaker (docs/INTEGRATIONS.md,
// "Zero-install"): `npx -y process-undertaker run -- …` and the package's bin run by
// `npx`/`npm exec`, the tarballs (target/npm, scripts/build-npm.sh) installed into a
// temporary project and npm kept offline, so nothing is fetched from a registry. A host
// holds the server's stdin and stdout (socketpairs: Node's 'pipe') and is kill -9ed
// while the launcher lives on; undertaker sees its stdio peer gone and tears the tree
// down: 0 processes left, the launcher included (it exits with undertaker). The server
// never reads its stdin and leaves a `setsid` daemon behind.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { tarballs, environOf, processesWith, describe, waitUntil } = require('./support');

let scratch;
let project;

before(() => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ut-npx-'));
  project = path.join(scratch, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'ut-npx-test', private: true }));
  childProcess.execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs()], {
    cwd: project,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
});

after(() => {
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

// The host: holds the far ends of its child's stdin and stdout, and waits.
const HOST = `
const child = require('node:child_process').spawn(process.argv[2], process.argv.slice(3), {
  stdio: ['pipe', 'pipe', 'inherit'],
});
child.on('error', (e) => { console.error(e.message); process.exit(1); });
setInterval(() => {}, 1 << 30);
`;

/** `argv(up)`: the host's command line for a server that writes `up` once it runs. */
async function hostKill9LeavesNothing(t, argv) {
  const token = `ut-${crypto.randomUUID()}`;
  const stateDir = fs.mkdtempSync(path.join(scratch, 'state-'));
  const up = path.join(stateDir, 'up');
  const env = {
    ...process.env,
    UT_TEST_TOKEN: token,
    UNDERTAKER_STATE_DIR: stateDir,
    // Nothing from a registry: the project's own install or nothing.
    npm_config_offline: 'true',
    npm_config_cache: path.join(scratch, 'npm-cache'),
    npm_config_update_notifier: 'false',
  };
  delete env.UNDERTAKER_TREE;
  delete env.UNDERTAKER_BIN;
  t.after(() => {
    for (const pid of processesWith(token)) {
      if (environOf(pid).UT_TEST_TOKEN === token) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch (_) {
          /* gone */
        }
      }
    }
  });
  const hostFile = path.join(scratch, 'host.js');
  fs.writeFileSync(hostFile, HOST);
  const host = childProcess.spawn(process.execPath, [hostFile, ...argv(up)], {
    cwd: project,
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  assert.ok(await waitUntil(() => fs.existsSync(up), 120000), `the server never started: ${describe(processesWith(token))}`);
  assert.ok(await waitUntil(() => processesWith(token).length >= 4), describe(processesWith(token)));
  process.kill(host.pid, 'SIGKILL');
  assert.ok(await waitUntil(() => processesWith(token).length === 0), `survivors: ${describe(processesWith(token))}`);
}

/** `LAUNCHER… run --grace 300ms -- <server>` */
function run(...launcher) {
  return (up) => [
    ...launcher,
    'run',
    '--grace',
    '300ms',
    '--',
    ...['sh', '-c', `setsid sleep 1000 & echo up > ${up}; exec sleep 1001`],
  ];
}

test('npx -y process-undertaker run: host kill -9 leaves 0 processes', async (t) => {
  await hostKill9LeavesNothing(t, run('npx', '-y', 'process-undertaker'));
});

test('npx --no-install undertaker (the package bin) run: host kill -9 leaves 0 processes', async (t) => {
  await hostKill9LeavesNothing(t, run('npx', '--no-install', 'undertaker'));
});

test('npm exec -- undertaker run: host kill -9 leaves 0 processes', async (t) => {
  await hostKill9LeavesNothing(t, run('npm', 'exec', '--', 'undertaker'));
});

test('the bin relay itself (node_modules/.bin/undertaker) run: host kill -9 leaves 0 processes', async (t) => {
  await hostKill9LeavesNothing(t, run(path.join(project, 'node_modules/.bin/undertaker')));
});

// guardSelf(): the relay (this program's first process) stays undertaker's parent and
// holds its --owner-fd pipe, and lives on behind the shell: the stdio peer ends it.
const GUARDED = `
const { guardSelf } = require('process-undertaker');
(async () => {
  await guardSelf({ grace: '300ms' });
  require('node:child_process').spawn('sh', ['-c', 'setsid sleep 1000 & exec sleep 1001'], { stdio: 'ignore' });
  require('node:fs').writeFileSync(process.argv[2], 'up');
  setInterval(() => {}, 1 << 30);
})();
`;

test('guardSelf() behind sh -c: host kill -9 leaves 0 processes', async (t) => {
  const program = path.join(project, 'guarded.js');
  fs.writeFileSync(program, GUARDED);
  await hostKill9LeavesNothing(t, (up) => ['sh', '-c', '"$0" "$@"; exit $?', process.execPath, program, up]);
});

// A host that starts the same labelled server twice through npx, as one that reconnects
// does: the second start, with --replace, ends the first (the same host, though each
// start has its own npx process).
const RECONNECTING_HOST = `
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const [up1, up2, ...argv] = process.argv.slice(2);
const start = (up) => spawn(argv[0], argv.slice(1).map((a) => a.replace('@UP@', up)), { stdio: ['pipe', 'pipe', 'inherit'] });
start(up1);
const wait = setInterval(() => {
  if (fs.existsSync(up1)) {
    clearInterval(wait);
    start(up2);
  }
}, 50);
setInterval(() => {}, 1 << 30);
`;

function cmdlineOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch (_) {
    return '';
  }
}

test('npx -y process-undertaker run --replace: a reconnecting host keeps one tree', async (t) => {
  const token = `ut-${crypto.randomUUID()}`;
  const stateDir = fs.mkdtempSync(path.join(scratch, 'state-'));
  const [up1, up2] = [path.join(stateDir, 'up1'), path.join(stateDir, 'up2')];
  const env = {
    ...process.env,
    UT_TEST_TOKEN: token,
    UNDERTAKER_STATE_DIR: stateDir,
    npm_config_offline: 'true',
    npm_config_cache: path.join(scratch, 'npm-cache'),
    npm_config_update_notifier: 'false',
  };
  delete env.UNDERTAKER_TREE;
  delete env.UNDERTAKER_BIN;
  t.after(() => {
    for (const pid of processesWith(token)) {
      if (environOf(pid).UT_TEST_TOKEN === token) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch (_) {
          /* gone */
        }
      }
    }
  });
  const hostFile = path.join(scratch, 'reconnecting-host.js');
  fs.writeFileSync(hostFile, RECONNECTING_HOST);
  const server = ['sh', '-c', 'setsid sleep 1000 & echo up > @UP@; exec sleep 1001'];
  const argv = ['npx', '-y', 'process-undertaker', 'run', '--label', 'srv', '--replace', '--grace', '300ms', '--', ...server];
  const host = childProcess.spawn(process.execPath, [hostFile, up1, up2, ...argv], {
    cwd: project,
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  assert.ok(await waitUntil(() => fs.existsSync(up2), 120000), `the second server never started: ${describe(processesWith(token))}`);
  // The first start is gone, its npx included: nothing but the host names up1.
  const firstStart = () => processesWith(token).filter((p) => p !== host.pid && cmdlineOf(p).includes(up1));
  assert.ok(await waitUntil(() => firstStart().length === 0), describe(firstStart()));
  const daemons = processesWith(token).filter((p) => cmdlineOf(p) === 'sleep 1000');
  assert.equal(daemons.length, 1, describe(processesWith(token)));
  // ps names the host, not the npx in between.
  const ps = JSON.parse(
    childProcess.execFileSync(path.join(project, 'node_modules/.bin/undertaker'), ['ps', '--json'], { env, encoding: 'utf8' }),
  );
  const live = ps.filter((r) => r.label === 'srv' && r.state === 'running');
  assert.equal(live.length, 1, JSON.stringify(ps));
  assert.equal(live[0].host_pid, host.pid, JSON.stringify(live[0]));
  process.kill(host.pid, 'SIGKILL');
  assert.ok(await waitUntil(() => processesWith(token).length === 0), `survivors: ${describe(processesWith(token))}`);
});
