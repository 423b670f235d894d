"""scripts/check-versions.sh passes on the built artifacts and fails on a mismatch."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

from conftest import REPO
from test_package import cargo_version

SCRIPT = REPO / "scripts/check-versions.sh"


def run(artifacts: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CHECK_VERSIONS_ARTIFACTS=str(artifacts))
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)


def npm_tarball(path: Path, manifest: dict) -> None:
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("package/package.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_the_built_artifacts_agree() -> None:
    done = run(REPO / "target")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"crate version {cargo_version()}" in done.stdout


def test_a_mismatch_fails(tmp_path: Path) -> None:
    version = cargo_version()
    (tmp_path / "wheels").mkdir()
    (tmp_path / "npm").mkdir()
    npm_tarball(tmp_path / "npm/good.tgz", {"name": "process-undertaker", "version": version})
    assert run(tmp_path).returncode == 0
    npm_tarball(
        tmp_path / "npm/pin.tgz",
        {"name": "process-undertaker", "version": version, "optionalDependencies": {"process-undertaker-linux-x64": "9.9.9"}},
    )
    done = run(tmp_path)
    assert done.returncode == 1 and "pins process-undertaker-linux-x64@9.9.9" in done.stdout, done.stdout
    (tmp_path / "npm/pin.tgz").unlink()
    (tmp_path / "wheels/undertaker-9.9.9-py3-none-any.whl").write_bytes(b"")
    done = run(tmp_path)
    assert done.returncode == 1 and "MISMATCH" in done.stdout, done.stdout
