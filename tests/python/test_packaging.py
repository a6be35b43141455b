"""The package as a user installs it: pip offline, cmake --install, py.typed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpubroker

SOURCE = Path(__file__).resolve().parents[2] / "client" / "python"


def _import_from(path: Path, env_extra=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(path)
    code = ("import gpubroker, pathlib; print(pathlib.Path(gpubroker.__file__).parent); "
            "print(gpubroker.library_path()); print(gpubroker.library_version())")  # fmt: skip
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_pip_installs_offline_with_the_systems_setuptools(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--quiet",
                          "--target", str(tmp_path), str(SOURCE)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    if out.returncode != 0 and "No module named pip" in out.stderr:
        pytest.skip("no pip for this Python")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "gpubroker" / "py.typed").exists()
    got = _import_from(tmp_path, {"GPUBROKER_LIBRARY": gpubroker.library_path()})
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0] == str(tmp_path / "gpubroker")


def test_library_found_next_to_the_package(tmp_path):
    import shutil

    pkg = tmp_path / "gpubroker"
    shutil.copytree(SOURCE / "gpubroker", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(gpubroker.library_path(), pkg / "libgpubroker.so.0")
    env = {"GPUBROKER_LIBRARY": ""}
    got = _import_from(tmp_path, env)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[1] == str(pkg / "libgpubroker.so.0")
    assert got.stdout.splitlines()[2] == gpubroker.library_version()


def test_version_matches_the_library():
    assert gpubroker.__version__ == gpubroker.library_version()
