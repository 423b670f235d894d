"""The wheel in a fresh virtual environment: the command, find_bin, wrap, versions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import REPO, Venv


def cargo_version() -> str:
    meta = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return next(p["version"] for p in json.loads(meta)["packages"] if p["name"] == "undertaker-cli")


def test_command_on_path_prints_the_crate_version(venv: Venv) -> None:
    out = subprocess.run([venv.undertaker, "--version"], check=True, capture_output=True, text=True).stdout
    assert out.strip() == f"undertaker {cargo_version()}"


def test_find_bin_is_the_bundled_binary(venv: Venv) -> None:
    out = subprocess.run(
        [venv.python, "-c", "import undertaker; print(undertaker.find_bin())"],
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},  # not found through PATH: the venv's own scripts dir
    ).stdout.strip()
    assert Path(out) == Path(venv.undertaker)


def test_module_version_and_py_typed(venv: Venv, wheel: Path) -> None:
    code = "import undertaker, pathlib; print(undertaker.__version__); print((pathlib.Path(undertaker.__file__).parent / 'py.typed').is_file())"
    out = subprocess.run([venv.python, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out == [cargo_version(), "True"]
    assert f"undertaker-{cargo_version()}-" in wheel.name


def test_wrap_prefixes_and_runs(venv: Venv, tmp_path: Path) -> None:
    code = (
        "import json, undertaker; "
        "print(json.dumps(undertaker.wrap('sh', ['-c', 'echo hi; exit 7'], label='t', grace='300ms', state_dir=%r)))"
        % str(tmp_path)
    )
    command, args = json.loads(
        subprocess.run([venv.python, "-c", code], check=True, capture_output=True, text=True).stdout
    )
    assert command == venv.undertaker
    assert args == ["run", "--label", "t", "--grace", "300ms", "--state-dir", str(tmp_path), "--", "sh", "-c", "echo hi; exit 7"]
    done = subprocess.run([command, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert (done.stdout, done.returncode) == ("hi\n", 7)


def test_wrap_refuses_a_string_for_args(venv: Venv) -> None:
    done = subprocess.run(
        [venv.python, "-c", "import undertaker; undertaker.wrap('sh', '-c')"], capture_output=True, text=True
    )
    assert done.returncode == 1 and "TypeError" in done.stderr
