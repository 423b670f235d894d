"""The wheel in a fresh virtual environment: the command, find_bin, wrap, versions."""

from __future__ import annotations

import json
import shutil
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


def test_python_m_undertaker_is_the_command(venv: Venv, tmp_path: Path) -> None:
    as_module = subprocess.run([venv.python, "-m", "undertaker", "--version"], capture_output=True, text=True)
    as_command = subprocess.run([venv.undertaker, "--version"], capture_output=True, text=True)
    assert (as_module.returncode, as_module.stdout) == (0, as_command.stdout), as_module.stderr
    assert as_module.stdout.strip() == f"undertaker {cargo_version()}"
    done = subprocess.run(
        [venv.python, "-m", "undertaker", "run", "--state-dir", str(tmp_path), "--", "sh", "-c", "echo hi; exit 7"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert (done.stdout, done.returncode) == ("hi\n", 7), done.stderr


def _fake_undertaker(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    fake = directory / "undertaker"
    fake.write_text(f"#!/bin/sh\necho undertaker {version}\n")
    fake.chmod(0o755)
    return fake


def _find_bin(venv: Venv, path: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [venv.python, "-c", "import undertaker; print(undertaker.find_bin())"],
        capture_output=True,
        text=True,
        env={"PATH": path},
    )


def test_find_bin_never_takes_another_version_from_path(venv: Venv, tmp_path: Path) -> None:
    other = _fake_undertaker(tmp_path / "other", "9.9.9")
    path = f"{other.parent}:/usr/bin:/bin"
    # The wheel's own binary wins over an earlier one on PATH.
    found = _find_bin(venv, path)
    assert Path(found.stdout.strip()) == Path(venv.undertaker), found.stderr
    hidden = Path(venv.undertaker + ".hidden")
    Path(venv.undertaker).rename(hidden)
    try:
        # Without it, another version on PATH is refused, and named.
        found = _find_bin(venv, path)
        assert found.returncode != 0 and found.stdout == "", found.stdout
        assert "FileNotFoundError" in found.stderr and "9.9.9" in found.stderr, found.stderr
        # The same version elsewhere on PATH is the same binary: taken.
        same = tmp_path / "same" / "undertaker"
        same.parent.mkdir()
        shutil.copy2(hidden, same)
        found = _find_bin(venv, f"{same.parent}:{path}")
        assert Path(found.stdout.strip()) == same, found.stderr
    finally:
        hidden.rename(venv.undertaker)


def test_wrap_refuses_words_that_are_not_strings(venv: Venv) -> None:
    done = subprocess.run(
        [venv.python, "-c", "import undertaker; undertaker.wrap('x', [1])"], capture_output=True, text=True
    )
    assert done.returncode == 1 and "TypeError: args[0] must be a string, not int" in done.stderr, done.stderr
    code = "import pathlib, undertaker; print(undertaker.wrap(pathlib.Path('/bin/sh'), [pathlib.Path('x')])[1][-2:])"
    done = subprocess.run([venv.python, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "['/bin/sh', 'x']", done.stderr
