"""The package's type hints (it ships py.typed), checked by mypy as its users'
checkers read them: the package is clean under --strict for the oldest
Python it supports, a user's typed code and the examples pass, and each
misuse that the hints exist to catch is caught, line by line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client" / "python"
CONFIG = PACKAGE / "mypy.ini"
CASES = Path(__file__).resolve().parent / "typing"


def _mypy(tmp_path: Path, *targets: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is not installed (scripts/install-deps.sh installs it)")
    # The package from the source tree: what pip and cmake --install ship.
    env = dict(os.environ, MYPYPATH=str(PACKAGE))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(CONFIG),
         "--cache-dir", str(tmp_path / "cache"), *map(str, targets)],  # fmt: skip
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,  # fmt: skip
    )


def test_the_package_is_clean_under_strict(tmp_path: Path) -> None:
    r = _mypy(tmp_path, PACKAGE / "gpubroker")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found in" in r.stdout


def test_typed_user_code_passes(tmp_path: Path) -> None:
    r = _mypy(tmp_path, CASES / "usage.py")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_examples_pass(tmp_path: Path) -> None:
    examples = sorted((ROOT / "examples" / "python").glob("*.py"))
    assert len(examples) >= 6
    r = _mypy(tmp_path, *examples)
    assert r.returncode == 0, r.stdout + r.stderr


def test_each_misuse_is_refused_and_nothing_else(tmp_path: Path) -> None:
    source = CASES / "misuse.py"
    marked: Set[int] = {
        n for n, line in enumerate(source.read_text().splitlines(), 1)
        if line.rstrip().endswith("# error")
    }  # fmt: skip
    assert len(marked) >= 15
    r = _mypy(tmp_path, source)
    reported = {int(n) for n in re.findall(r"misuse\.py:(\d+): error:", r.stdout)}
    assert reported, r.stdout + r.stderr  # mypy ran and found the package
    assert "Cannot find implementation or library stub" not in r.stdout, r.stdout
    assert marked - reported == set(), f"not refused (a hint too loose):\n{r.stdout}"
    assert reported - marked == set(), f"refused but not marked:\n{r.stdout}"
