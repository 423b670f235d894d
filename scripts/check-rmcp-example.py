#!/usr/bin/env python3
"""CI check for examples/rmcp-host: an rmcp client starts
@modelcontextprotocol/server-everything through undertaker's process-wrap layer; the
host is then kill -9ed and every process it left must be gone.

Runs itself again inside a private PID namespace (unshare), where it is PID 1 and
every other process is one the check started. As a control, the same host without the
layer (--unguarded) must leave the server running: otherwise the check could not fail.
Usage: check-rmcp-example.py HOST_BINARY SERVER_JS UNDERTAKER_BINARY
"""
import json, os, shutil, signal, subprocess, sys, tempfile, time

def others():
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in ("Z", "X"):
                pids.append(int(name))
    return pids

def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass

def run(host, server, extra, patience):
    h = subprocess.Popen([host, server, "--hold"] + extra, stdout=subprocess.PIPE, text=True)
    line = h.stdout.readline()
    if not line:
        sys.exit(f"host printed nothing (status {h.wait()})")
    report = json.loads(line)
    print("connected:", report, flush=True)
    h.kill()  # SIGKILL
    h.wait()
    end = time.time() + patience
    while time.time() < end:
        reap()
        if not others():
            break
        time.sleep(0.1)
    reap()
    return report, others()

def inside():
    host, server, ut = sys.argv[1:4]
    os.environ["UNDERTAKER_BIN"] = ut
    state = tempfile.mkdtemp(prefix="undertaker-rmcp-check-")
    os.environ["UNDERTAKER_STATE_DIR"] = state
    try:
        check(host, server)
    finally:
        shutil.rmtree(state, ignore_errors=True)

def check(host, server):
    # Nothing ends the control's server: a short look tells it stayed.
    report, left = run(host, server, ["--unguarded", "--leave-child"], 2)
    control = [p for p in left]
    print(f"control (no layer): {len(control)} process(es) left after the host's kill -9", flush=True)
    for p in control:
        os.kill(p, signal.SIGKILL)
    time.sleep(0.2)
    reap()
    # Waited for until nothing is left (a loaded machine may take a while), never slept on.
    report, left = run(host, server, ["--leave-child"], 60)
    if not report.get("tree"):
        sys.exit("the server was not adopted into a tree")
    print(f"guarded: {len(left)} survivor(s) after the host's kill -9", flush=True)
    if left:
        for p in left:
            print(p, open(f"/proc/{p}/cmdline").read().replace("\0", " "))
        sys.exit(1)
    if not control:
        sys.exit("control left nothing: the check cannot tell the layer works")

if os.environ.get("CHECK_RMCP_INSIDE"):
    inside()
else:
    env = dict(os.environ, CHECK_RMCP_INSIDE="1")
    args = ["unshare", "--pid", "--fork", "--mount-proc"]
    if os.geteuid() != 0:
        args[1:1] = ["--user", "--map-root-user"]
    sys.exit(subprocess.call(args + [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
