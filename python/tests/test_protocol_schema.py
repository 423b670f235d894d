"""The Python client against the one protocol schema (issue #20 item 3): every reply
and event a real `undertaker supervise` sends this client validates against
docs/supervise.schema.json (jsonschema, which comes with `mcp`), each reply as its
verb's type; and the generated TypedDicts are the schema's (the generator's --check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Venv, base_env

HOST = r'''
import json, subprocess, sys
import jsonschema
import undertaker

schema = json.load(open(sys.argv[1]))
seen = []

class Recording(undertaker.Supervisor):
    def _on_event(self, msg):
        seen.append(("Event", msg))
        super()._on_event(msg)

def check(kind, reply):
    seen.append((kind, reply))
    return reply

quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with Recording(grace="300ms", tier="subreaper", label="schema") as sup:
    check("HelloReply", sup.hello)
    done = sup.spawn(["sh", "-c", "exit 3"], **quiet)
    kept = sup.spawn(["sleep", "1000"], label="kept", **quiet)
    group = subprocess.Popen(["sleep", "1000"], start_new_session=True, **quiet)
    check("RegisterReply", sup.register(group.pid))
    adoptee = subprocess.Popen(["sleep", "1000"], **quiet)
    adopted = check("AdoptReply", sup.request({"op": "adopt", "pid": adoptee.pid}))
    check("ListReply", sup.request({"op": "list"}))
    check("SpawnReply", sup.request({"op": "spawn", "argv": ["true"], "id": "s"}))
    check("KillReply", sup.request({"op": "kill", "tree": kept.tree}))
    check("ReleaseReply", sup.request({"op": "release", "tree": adopted["tree"]}))
    check("UnregisterReply", sup.unregister(group.pid))
    for line in ({"op": "adopt", "pid": 1}, {"op": "nope"}, {"op": "kill", "tree": "x"}):
        try:
            sup.request(line)
        except undertaker.SupervisorError as e:
            check("ErrorReply", e.reply)
    try:
        sup.send_line("register x")
    except undertaker.SupervisorError as e:
        check("ErrorReply", e.reply)
    print("STATUS", done.wait(30), flush=True)
    adoptee.kill(); group.kill(); adoptee.wait(); group.wait()

checked = 0
for kind, message in seen:
    if message is None:
        continue
    jsonschema.validate(message, {"$ref": "#/definitions/" + kind, "definitions": schema["definitions"]})
    # ... and nothing else: the union of every message also takes it.
    jsonschema.validate(message, schema)
    checked += 1
print("VALID", checked, sorted({kind for kind, m in seen if m is not None}), flush=True)
'''


def test_real_replies_and_events_validate_against_the_schema(
    venv: Venv, tmp_path: Path, state_dir: Path, token: str
) -> None:
    host = tmp_path / "host.py"
    host.write_text(HOST)
    done = subprocess.run(
        [venv.python, str(host), str(REPO / "docs/supervise.schema.json")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=base_env(token, state_dir),
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0] == "STATUS 3", lines
    kinds = "['AdoptReply', 'ErrorReply', 'Event', 'HelloReply', 'KillReply', 'ListReply', 'RegisterReply', 'ReleaseReply', 'SpawnReply', 'UnregisterReply']"
    assert lines[1].startswith("VALID ") and lines[1].endswith(kinds), lines


def test_the_generated_types_are_the_schemas() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen-protocol-types.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_wrong_reply_is_caught(venv: Venv) -> None:
    # A validation that cannot fail proves nothing: a hello without its tier must not pass.
    code = (
        "import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
        "h = {'ok': True, 'op': 'hello', 'protocol': 1, 'version': 'x', 'pid': 1, 'owner': {'pid': None}, 'socket': False}; "
        "jsonschema.validate(h, {'$ref': '#/definitions/HelloReply', 'definitions': s['definitions']})"
    )
    done = subprocess.run([venv.python, "-c", code, str(REPO / "docs/supervise.schema.json")], capture_output=True, text=True)
    assert done.returncode != 0 and "'tier' is a required property" in done.stderr, done.stderr
