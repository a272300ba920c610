"""Fixtures of the maestro_core tests: the installation under test (MAESTRO_PREFIX, set by
scripts/test.sh; otherwise scripts/install.sh --debug installs into target/pytest-prefix),
the schemas, and a clean instance around every test."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _prefix() -> Path:
    given = os.environ.get("MAESTRO_PREFIX")
    if given:
        return Path(given)
    prefix = REPO / "target" / "pytest-prefix"
    subprocess.run([str(REPO / "scripts" / "install.sh"), "--debug", str(prefix)], check=True)
    return prefix


PREFIX = _prefix()
SITE = next(PREFIX.glob("lib/python3*/site-packages"))
sys.path.insert(0, str(SITE))

import maestro_core as M  # noqa: E402


@pytest.fixture(autouse=True)
def schemas(monkeypatch):
    """The examples' schema and one with every type; no PM from outside; a clean instance."""
    monkeypatch.setenv("MSTRO_SCHEMA_PATH", f"{REPO / 'examples' / 'c'}:{REPO / 'python' / 'tests'}")
    monkeypatch.setenv("MSTRO_SCHEMA_LIST", "ecmwf.yaml;types.yaml")
    monkeypatch.delenv("MSTRO_POOL_MANAGER_INFO", raising=False)
    yield
    try:
        M.mstro_finalize()
    except M.MaestroError:
        pass


@pytest.fixture
def env_for_children(tmp_path):
    """The environment of child processes: the module on PYTHONPATH, the schemas."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SITE)
    env["MSTRO_SCHEMA_PATH"] = str(REPO / "examples" / "c")
    env["MSTRO_SCHEMA_LIST"] = "ecmwf.yaml"
    env.pop("MSTRO_POOL_MANAGER_INFO", None)
    env["TMPDIR"] = str(tmp_path)
    return env
