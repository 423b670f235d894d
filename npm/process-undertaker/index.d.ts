// Types for process-undertaker (index.js). The protocol's messages (protocol.d.ts) are
// generated from docs/supervise.schema.json by scripts/gen-protocol-types.py.

import type {
  ErrorReply,
  HelloReply,
  KillReply,
  ListedTree,
  RegisterReply,
  ReleaseReply,
  ReplyByOp,
  Request,
  UnregisterReply,
} from './protocol';

export * from './protocol';

/** Environment variable undertaker sets on every process of a guarded tree. */
export declare const TREE_MARKER: 'UNDERTAKER_TREE';

/** Options of `undertaker run` (see its --help). */
export interface RunOptions {
  /** Label shown by `undertaker ps`. */
  label?: string;
  /** Grace between SIGTERM and SIGKILL, e.g. "2s", "300ms". */
  grace?: string;
  tier?: 'auto' | 'cgroup' | 'pidns' | 'subreaper' | 'portable';
  /** Registry directory (default $UNDERTAKER_STATE_DIR, else the XDG state dir). */
  stateDir?: string;
  /** Owner pid (default: whoever starts undertaker). */
  owner?: number;
  /** false: `--no-stdio-owner` (the stdio peer's going is not the owner's death). */
  stdioOwner?: boolean;
}

/** Name of the per-platform package carrying this machine's binary. */
export declare function platformPackage(): string;
/** The per-platform packages that may carry the binary here, best first (on Linux the static `-musl` one is the fallback, or the only one on musl). */
export declare function platformPackages(musl?: boolean): string[];
/** Path of the undertaker binary ($UNDERTAKER_BIN, else the platform package's). */
export declare function findBin(): string;
/** The `undertaker run` options, without the binary and without `--`. */
export declare function runArgs(options?: RunOptions): string[];
/** `{ command, args }` running `command args…` under `undertaker run --`. */
export declare function wrap(
  command: string,
  args?: readonly string[],
  options?: Omit<RunOptions, 'owner'>,
): { command: string; args: string[] };

export interface GuardSelfOptions extends Omit<RunOptions, 'owner'> {
  /** The command line to re-run (default: node, its exec arguments, this script's arguments). */
  argv?: readonly string[];
  env?: Record<string, string | undefined>;
}
/**
 * Re-runs this program under `undertaker run`, keeping the pid its starter knows.
 * Resolves at once inside a guarded tree; never settles in the original process,
 * which stays as a relay and exits with the program's status.
 */
export declare function guardSelf(options?: GuardSelfOptions): Promise<void>;

export interface SupervisorOptions {
  label?: string;
  grace?: string;
  tier?: 'auto' | 'cgroup' | 'pidns' | 'subreaper' | 'portable';
  stateDir?: string;
  /** The undertaker binary (default findBin()). */
  bin?: string;
  env?: Record<string, string | undefined>;
}

/** Any reply of `undertaker supervise`, untyped (see `Reply` for the typed union). */
export interface SupervisorReply {
  ok: boolean;
  id?: unknown;
  [key: string]: unknown;
}

export declare class SupervisorError extends Error {
  readonly code: string;
  /** For `refused`: why the process or group could not be proven (docs/SUPERVISE.md). */
  readonly reason: string | null;
  /** The error reply as the supervisor wrote it. */
  readonly reply: ErrorReply;
}

export declare class GuardedProcess {
  readonly tree: string;
  /** The tree's root pid (null when the supervisor did not report one). */
  readonly pid: number | null;
  readonly args: unknown;
  /** The root's exit status once known, null if the supervisor ended first. */
  readonly exitStatus: number | null | undefined;
  wait(): Promise<number | null>;
  /** Tears the whole tree down now; resolves null when it was already gone. */
  kill(): Promise<KillReply | null>;
  /** Stops guarding the tree; nothing is signalled. */
  release(): Promise<ReleaseReply>;
}

export declare class Supervisor {
  constructor(options?: SupervisorOptions);
  readonly pid: number | undefined;
  readonly hello: HelloReply | null;
  start(): Promise<HelloReply>;
  /** One request; the reply has its verb's type (`id` is set here). */
  request<R extends Request>(obj: R): Promise<ReplyByOp[R['op']]>;
  /** One raw line, e.g. `register 1234`. */
  sendLine(line: string): Promise<SupervisorReply>;
  spawn(
    argv: readonly string[],
    options?: { env?: Record<string, string>; cwd?: string; label?: string },
  ): Promise<GuardedProcess>;
  /** A child of this process (ChildProcess or pid) and its descendants become a tree. */
  adopt(processOrPid: number | { pid?: number }): Promise<GuardedProcess>;
  register(pgid: number): Promise<RegisterReply>;
  unregister(pgid: number): Promise<UnregisterReply>;
  list(): Promise<ListedTree[]>;
  /** Closes the control channel: every tree is torn down and the supervisor exits. */
  close(): Promise<number | null>;
}
