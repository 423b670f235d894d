'use strict';
// process-undertaker: the undertaker binary for Node hosts, found in the per-platform
// package npm installed through optionalDependencies (no install script), plus wrap(),
// guardSelf() and a Supervisor client for `undertaker supervise` (docs/SUPERVISE.md).

const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const TREE_MARKER = 'UNDERTAKER_TREE';

/** Whether this Node runs on musl (Alpine): a glibc build of Node reports its glibc. */
function isMusl() {
  if (process.platform !== 'linux') return false;
  try {
    return !process.report.getReport().header.glibcVersionRuntime;
  } catch (_) {
    return false;
  }
}

/**
 * The per-platform packages that may carry the binary for this machine, best first. On
 * Linux, `-musl` is the static musl build: the only one for musl (Alpine), and a
 * fallback for glibc, where it runs too.
 */
function platformPackages(musl = isMusl()) {
  const base = `process-undertaker-${process.platform}-${process.arch}`;
  if (process.platform !== 'linux') return [base];
  return musl ? [`${base}-musl`] : [base, `${base}-musl`];
}

/** The per-platform package that carries the binary for this machine. */
function platformPackage() {
  return platformPackages()[0];
}

/** Path of the undertaker binary: $UNDERTAKER_BIN, else the platform package's. */
function findBin() {
  const override = process.env.UNDERTAKER_BIN;
  if (override) {
    if (isExecutable(override)) return override;
    throw new Error(`UNDERTAKER_BIN=${override} is not an executable file`);
  }
  const pkg = platformPackage();
  let manifest;
  for (const candidate of platformPackages()) {
    try {
      manifest = require.resolve(`${candidate}/package.json`);
      break;
    } catch (_) {
      /* the next one */
    }
  }
  if (!manifest) {
    throw new Error(
      `process-undertaker: no binary for ${process.platform}-${process.arch}: the optional ` +
        `dependency ${pkg} is not installed (unsupported platform, or installed with ` +
        `--no-optional / --omit=optional); set UNDERTAKER_BIN to an undertaker binary`,
    );
  }
  const exe = process.platform === 'win32' ? 'undertaker.exe' : 'undertaker';
  const bin = path.join(path.dirname(manifest), 'bin', exe);
  if (!isExecutable(bin)) {
    // Some package managers drop the mode bits of files outside "bin".
    try {
      fs.chmodSync(bin, 0o755);
    } catch (_) {
      /* reported below */
    }
    if (!isExecutable(bin)) throw new Error(`process-undertaker: ${bin} is not executable`);
  }
  return bin;
}

function isExecutable(p) {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch (_) {
    return false;
  }
}

/** The `undertaker run` options (without the binary and without `--`). */
function runArgs(options = {}) {
  const args = ['run'];
  if (options.label != null) args.push('--label', String(options.label));
  if (options.grace != null) args.push('--grace', String(options.grace));
  if (options.tier != null) args.push('--tier', String(options.tier));
  if (options.stateDir != null) args.push('--state-dir', String(options.stateDir));
  if (options.owner != null) args.push('--owner', String(options.owner));
  if (options.stdioOwner === false) args.push('--no-stdio-owner');
  return args;
}

/**
 * `{ command, args }` running `command args…` under `undertaker run --`: spread it into
 * StdioClientTransport's parameters or pass it to child_process.spawn.
 */
function wrap(command, args = [], options = {}) {
  if (typeof command !== 'string') throw new TypeError('command must be a string');
  if (!Array.isArray(args)) throw new TypeError('args must be an array of strings');
  return { command: findBin(), args: [...runArgs(options), '--', command, ...args.map(String)] };
}

// SIGUSR1 is left out: Node reserves it for its inspector.
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR2', 'SIGWINCH'];

/**
 * Re-runs this program under `undertaker run`, keeping the pid its starter knows.
 *
 * Call first thing: `await guardSelf()`. Inside a guarded tree ($UNDERTAKER_TREE set)
 * the promise resolves at once. Otherwise this process (the pid the shell knows; Node
 * cannot exec, so it stays, as a relay) starts `undertaker run --owner-fd 3 -- <node
 * and this program's arguments>` with its own stdio, keeps the write end of that pipe
 * (end of file = the relay is gone, no pid to reuse), forwards SIGINT/TERM/HUP/QUIT/
 * USR2/WINCH to undertaker and exits with the program's status; the returned promise
 * never settles there, so nothing after the `await` runs twice. The program runs again
 * as the guardian's command and its `await guardSelf()` resolves.
 */
function guardSelf(options = {}) {
  if (process.env[TREE_MARKER]) return Promise.resolve();
  if (process.platform !== 'linux') {
    return Promise.reject(new Error('guardSelf() needs Linux (undertaker run is Linux-only for now)'));
  }
  const bin = findBin();
  const argv = options.argv || [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  const args = [...runArgs(options), '--owner-fd', '3', '--', ...argv];
  // fd 3 of the guardian is the read end of a pipe; this process holds the write end
  // until it dies, so end of file there means the host is gone (no pid to reuse).
  const guardian = childProcess.spawn(bin, args, {
    stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
    env: options.env || process.env,
  });
  const handlers = {};
  for (const sig of FORWARDED) {
    handlers[sig] = () => {
      // The guardian is our unreaped child until 'exit': its pid names nobody else.
      if (guardian.exitCode === null && guardian.signalCode === null) guardian.kill(sig);
    };
    process.on(sig, handlers[sig]);
  }
  guardian.on('error', (e) => {
    process.stderr.write(`process-undertaker: guardSelf could not start ${bin}: ${e.message}\n`);
    process.exit(125);
  });
  guardian.on('exit', (code, signal) => {
    process.exit(signal ? 128 + (require('node:os').constants.signals[signal] || 0) : code);
  });
  return new Promise(() => {});
}

class SupervisorError extends Error {
  constructor(code, message, reply, reason) {
    super(`${code}${reason ? `/${reason}` : ''}: ${message}`);
    this.name = 'SupervisorError';
    this.code = code;
    /** For `refused`: why the process or group could not be proven. */
    this.reason = reason || null;
    this.reply = reply;
  }
}

/** One tree held by a Supervisor. `wait()` resolves with the root's exit status. */
class GuardedProcess {
  constructor(supervisor, tree, pid, args) {
    this.supervisor = supervisor;
    this.tree = tree;
    this.pid = pid;
    this.args = args;
    this.exitStatus = undefined;
    this._exited = new Promise((resolve) => {
      this._resolveExit = resolve;
    });
  }
  _setExited(status) {
    if (this.exitStatus === undefined) {
      this.exitStatus = status;
      this._resolveExit(status);
    }
  }
  wait() {
    return this._exited;
  }
  /** Tears the whole tree down now (SIGTERM, SIGKILL after the grace period); a no-op once it is gone. */
  async kill() {
    if (this.exitStatus !== undefined) return null;
    try {
      return await this.supervisor.request({ op: 'kill', tree: this.tree });
    } catch (e) {
      if (e instanceof SupervisorError && e.code === 'unknown_tree') return null; // it ended meanwhile
      throw e;
    }
  }
  /** Stops guarding the tree; nothing is signalled. */
  release() {
    return this.supervisor.request({ op: 'release', tree: this.tree });
  }
}

/**
 * A client of `undertaker supervise`, started as this process's child (so this process
 * is its owner: its death tears down every tree). Requests go one at a time; the reply
 * to the request in flight is the next line that is not an event.
 */
class Supervisor {
  constructor(options = {}) {
    const argv = ['supervise'];
    if (options.stateDir != null) argv.push('--state-dir', String(options.stateDir));
    if (options.grace != null) argv.push('--grace', String(options.grace));
    if (options.label != null) argv.push('--label', String(options.label));
    if (options.tier != null) argv.push('--tier', String(options.tier));
    this.bin = options.bin || findBin();
    this.argv = argv;
    this.env = options.env;
    this.trees = new Map();
    this._earlyExits = new Map();
    this._nextId = 1;
    this._queue = Promise.resolve();
    this._waiting = null;
    this._closed = null;
    this.hello = null;
  }

  /** Starts the supervisor and says hello; resolves with the hello reply. */
  async start() {
    if (this.child) return this.hello;
    const child = childProcess.spawn(this.bin, this.argv, {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: this.env || process.env,
    });
    this.child = child;
    this.pid = child.pid;
    this._closed = new Promise((resolve) =>
      child.on('exit', (code, signal) => {
        for (const tree of this.trees.values()) tree._setExited(null);
        resolve({ code, signal });
      }),
    );
    child.on('error', (e) => this._fail(e));
    child.stdin.on('error', () => {});
    const lines = readline.createInterface({ input: child.stdout, crlfDelay: Infinity });
    lines.on('line', (line) => this._onLine(line));
    lines.on('close', () => this._fail(new Error('the supervisor closed its output')));
    this.hello = await this.request({ op: 'hello' });
    return this.hello;
  }

  _onLine(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (_) {
      return;
    }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) return;
    if ('event' in msg) {
      if (msg.event !== 'exited') return;
      const status = typeof msg.status === 'number' ? msg.status : null;
      const tree = this.trees.get(String(msg.tree));
      // The event can overtake the _track of the reply before it (same chunk of output).
      if (tree) tree._setExited(status);
      else this._earlyExits.set(String(msg.tree), status);
      return;
    }
    const waiting = this._waiting;
    this._waiting = null;
    if (waiting) waiting.resolve(msg);
  }

  _fail(err) {
    const waiting = this._waiting;
    this._waiting = null;
    if (waiting) waiting.reject(err);
  }

  _exchange(line) {
    const run = () =>
      new Promise((resolve, reject) => {
        if (!this.child || this.child.stdin.destroyed) {
          reject(new Error('the supervisor is not running'));
          return;
        }
        this._waiting = { resolve, reject };
        this.child.stdin.write(line + '\n');
      }).then((reply) => {
        if (reply.ok === false) {
          const err = reply.error || {};
          throw new SupervisorError(String(err.code || 'error'), String(err.message || ''), reply, err.reason);
        }
        return reply;
      });
    const result = this._queue.then(run, run);
    this._queue = result.catch(() => {});
    return result;
  }

  /** Sends one JSON request; resolves with its reply, rejects with SupervisorError. */
  request(obj) {
    const body = { id: this._nextId++, ...obj };
    return this._exchange(JSON.stringify(body));
  }

  /** Sends one raw protocol line, e.g. `register 1234`. */
  sendLine(line) {
    if (line.includes('\n')) throw new Error('one line at a time');
    return this._exchange(line);
  }

  _track(reply, args) {
    const proc = new GuardedProcess(this, String(reply.tree), typeof reply.pid === 'number' ? reply.pid : null, args);
    this.trees.set(proc.tree, proc);
    if (this._earlyExits.has(proc.tree)) {
      proc._setExited(this._earlyExits.get(proc.tree));
      this._earlyExits.delete(proc.tree);
    }
    return proc;
  }

  /** Has the supervisor start argv as a new tree (its stdio is /dev/null). */
  async spawn(argv, options = {}) {
    const req = { op: 'spawn', argv: argv.map(String) };
    if (options.env) req.env = options.env;
    if (options.cwd) req.cwd = options.cwd;
    if (options.label) req.label = options.label;
    return this._track(await this.request(req), argv);
  }

  /** Puts a child of this process (a ChildProcess or a pid) and its descendants under guard. */
  async adopt(processOrPid) {
    const pid = typeof processOrPid === 'number' ? processOrPid : processOrPid.pid;
    return this._track(await this.request({ op: 'adopt', pid }), pid);
  }

  /** `register <pgid>`: a group whose leader is our child. */
  register(pgid) {
    return this.sendLine(`register ${Math.trunc(pgid)}`);
  }

  /** `unregister <pgid>`: stop guarding that group; nothing is signalled. */
  unregister(pgid) {
    return this.sendLine(`unregister ${Math.trunc(pgid)}`);
  }

  /** The trees held, as the supervisor reports them. */
  async list() {
    const reply = await this.request({ op: 'list' });
    return Array.isArray(reply.trees) ? reply.trees : [];
  }

  /** Closes the control channel: every tree is torn down and the supervisor exits. */
  async close() {
    if (!this.child) return null;
    this.child.stdin.end();
    const { code } = await this._closed;
    return code;
  }
}

module.exports = {
  TREE_MARKER,
  platformPackage,
  platformPackages,
  findBin,
  runArgs,
  wrap,
  guardSelf,
  Supervisor,
  SupervisorError,
  GuardedProcess,
};
