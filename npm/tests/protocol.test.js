'use strict';
// The Node client against the one protocol schema (issue #20 item 3): the replies and
// events a real `undertaker supervise` sends process-undertaker's Supervisor validate
// against docs/supervise.schema.json (ajv, which comes with the MCP SDK), each reply as
// its verb's type; the generated protocol.d.ts types them for a strict TypeScript
// consumer, and protocol.d.ts is what the schema gives. The tarballs (target/npm) are
// installed into a temporary project, as in package.test.js (same pins).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { REPO, tarballs } = require('./support');
const SCHEMA = path.join(REPO, 'docs/supervise.schema.json');
const SDK_PIN = '@modelcontextprotocol/sdk@1.32.2';
const TYPESCRIPT_PIN = 'typescript@5.9.3';

let scratch;
let project;

before(() => {
  const [platform, main] = tarballs();
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ut-npm-protocol-'));
  project = path.join(scratch, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'ut-npm-protocol', private: true }));
  childProcess.execFileSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--loglevel=error', platform, main, SDK_PIN, TYPESCRIPT_PIN],
    { cwd: project, stdio: ['ignore', 'ignore', 'inherit'] },
  );
});

after(() => {
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

const HOST = `
const childProcess = require('node:child_process');
const fs = require('node:fs');
const Ajv = require('ajv');
const { Supervisor, SupervisorError } = require('process-undertaker');

async function main() {
  const schema = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const seen = [];
  const sup = new Supervisor({ grace: '300ms', tier: 'subreaper', label: 'schema' });
  const onLine = sup._onLine.bind(sup);
  sup._onLine = (line) => {
    const msg = JSON.parse(line);
    if ('event' in msg) seen.push([msg.event === 'ended' ? 'EndedEvent' : 'ExitedEvent', msg]);
    onLine(line);
  };
  const check = (kind, reply) => (seen.push([kind, reply]), reply);
  check('HelloReply', await sup.start());
  const done = await sup.spawn(['sh', '-c', 'exit 3']);
  const kept = check('SpawnReply', await sup.request({ op: 'spawn', argv: ['sleep', '1000'], label: 'kept' }));
  const quiet = { stdio: 'ignore' };
  const group = childProcess.spawn('sleep', ['1000'], { ...quiet, detached: true });
  check('RegisterReply', await sup.register(group.pid));
  const adoptee = childProcess.spawn('sleep', ['1000'], quiet);
  const adopted = check('AdoptReply', await sup.request({ op: 'adopt', pid: adoptee.pid }));
  check('ListReply', await sup.request({ op: 'list' }));
  check('KillReply', await sup.request({ op: 'kill', tree: kept.tree }));
  check('ReleaseReply', await sup.request({ op: 'release', tree: adopted.tree }));
  check('UnregisterReply', await sup.unregister(group.pid));
  for (const bad of [{ op: 'adopt', pid: 1 }, { op: 'nope' }, { op: 'kill', tree: 'x' }]) {
    try {
      await sup.request(bad);
    } catch (e) {
      if (!(e instanceof SupervisorError)) throw e;
      check('ErrorReply', e.reply);
    }
  }
  console.log('STATUS', await done.wait());
  await sup.close();
  adoptee.kill('SIGKILL');
  group.kill('SIGKILL');
  const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true });
  const whole = ajv.compile(schema);
  const kinds = new Set();
  for (const [kind, message] of seen) {
    const one = ajv.compile({ $ref: '#/definitions/' + kind, definitions: schema.definitions });
    if (!one(message)) throw new Error(kind + ' ' + JSON.stringify(message) + ': ' + ajv.errorsText(one.errors));
    if (!whole(message)) throw new Error('not a message: ' + JSON.stringify(message));
    kinds.add(kind);
  }
  // A validation that cannot fail proves nothing: a hello without its tier must not pass.
  const hello = ajv.compile({ $ref: '#/definitions/HelloReply', definitions: schema.definitions });
  const { tier, ...withoutTier } = seen[0][1];
  console.log('WRONG', hello(withoutTier) ? 'accepted' : 'refused');
  console.log('VALID', [...kinds].sort().join(','));
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
`;

test('real replies and events of the Supervisor validate against the schema', () => {
  const token = `ut-${crypto.randomUUID()}`;
  const stateDir = fs.mkdtempSync(path.join(scratch, 'state-'));
  const env = { ...process.env, UT_TEST_TOKEN: token, UNDERTAKER_STATE_DIR: stateDir };
  delete env.UNDERTAKER_TREE;
  delete env.UNDERTAKER_BIN;
  const hostFile = path.join(project, 'schema-host.js');
  fs.writeFileSync(hostFile, HOST);
  const done = childProcess.spawnSync(process.execPath, [hostFile, SCHEMA], {
    cwd: project,
    env,
    encoding: 'utf8',
    timeout: 120000,
  });
  assert.equal(done.status, 0, done.stdout + done.stderr);
  const out = done.stdout.trim().split('\n');
  assert.deepEqual(out, [
    'STATUS 3',
    'WRONG refused',
    'VALID AdoptReply,EndedEvent,ErrorReply,ExitedEvent,HelloReply,KillReply,ListReply,RegisterReply,ReleaseReply,SpawnReply,UnregisterReply',
  ]);
});

test('replies are typed per verb for a strict TypeScript consumer', () => {
  const good = path.join(project, 'typed.ts');
  fs.writeFileSync(
    good,
    `import { Supervisor, HelloReply, ListedTree, RegisterReply, KillReply, SpawnReply, ErrorCode } from 'process-undertaker';
async function main(): Promise<void> {
  const sup = new Supervisor();
  const hello: HelloReply = await sup.start();
  const tier: 'cgroup' | 'subreaper' | 'portable' | 'job' = hello.tier;
  const trees: ListedTree[] = await sup.list();
  const pgid: number | null = trees[0].pgid;
  const reg: RegisterReply = await sup.register(5);
  const spawned: SpawnReply = await sup.request({ op: 'spawn', argv: ['true'] });
  const killed: KillReply = await sup.request({ op: 'kill', tree: spawned.tree });
  const code: ErrorCode = 'bad_fds';
  void [tier, pgid, reg.members, killed.live, code];
}
void main;
`,
  );
  const bad = path.join(project, 'typed-bad.ts');
  fs.writeFileSync(
    bad,
    `import { Supervisor } from 'process-undertaker';
async function main(): Promise<void> {
  const killed = await new Supervisor().request({ op: 'kill', tree: 'x' });
  const pid: number = killed.pid;
  void pid;
}
void main;
`,
  );
  const tsc = path.join(project, 'node_modules/typescript/bin/tsc');
  const flags = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext'];
  const ok = childProcess.spawnSync(process.execPath, [tsc, ...flags, good], { cwd: project, encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stdout + ok.stderr);
  const wrong = childProcess.spawnSync(process.execPath, [tsc, ...flags, bad], { cwd: project, encoding: 'utf8' });
  assert.notEqual(wrong.status, 0);
  assert.match(wrong.stdout, /TS2339: Property 'pid' does not exist on type 'KillReply'/);
});

test('protocol.d.ts and the Python TypedDicts are what the schema gives', () => {
  const done = childProcess.spawnSync('python3', [path.join(REPO, 'scripts/gen-protocol-types.py'), '--check'], {
    encoding: 'utf8',
  });
  assert.equal(done.status, 0, done.stderr);
});
