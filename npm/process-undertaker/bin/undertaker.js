#!/usr/bin/env node
'use strict';
// `undertaker` on PATH for npm installs. Where Node can replace itself
// (process.execve, Node >= 23.11) the binary takes over this process, so the pid the
// caller knows is undertaker's. Otherwise this process stays as the binary's parent:
// it forwards signals and exits with the binary's status; undertaker's owner is then
// this process, which dies when its own parent's pipes and signals say so.
const { findBin } = require('../index.js');

let bin;
try {
  bin = findBin();
} catch (e) {
  process.stderr.write(`${e.message}\n`);
  process.exit(125);
}
const args = process.argv.slice(2);
if (typeof process.execve === 'function') {
  process.execve(bin, [bin, ...args], process.env);
}
const child = require('node:child_process').spawn(bin, args, { stdio: 'inherit' });
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR2', 'SIGWINCH']) {
  process.on(sig, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
  });
}
child.on('error', (e) => {
  process.stderr.write(`undertaker: ${e.message}\n`);
  process.exit(125);
});
child.on('exit', (code, signal) => {
  process.exit(signal ? 128 + (require('node:os').constants.signals[signal] || 0) : code);
});
