"""maestro_core against other processes and languages: a Python consumer of a C producer
and a Python producer for a C consumer (one job under maestro run, the PM found through
PMIx), and a Python producer for a Rust consumer (pool_archiver) with maestro pm."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import PREFIX, REPO

EXAMPLES = REPO / "examples"
MAESTRO = PREFIX / "bin" / "maestro"


@pytest.fixture(scope="session")
def c_programs(tmp_path_factory):
    """pm_tool, producer and consumer built against the installation."""
    out = tmp_path_factory.mktemp("c")
    env = dict(os.environ, PKG_CONFIG_PATH=str(PREFIX / "lib" / "pkgconfig"))
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "maestro"], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in ("pm_tool", "producer", "consumer"):
        subprocess.run(
            ["cc", "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-o", str(out / name), str(EXAMPLES / "c" / f"{name}.c")]
            + flags,
            check=True,
        )
    return out


def run(cmd, env, timeout=120):
    """Runs `cmd` in its own process group; kills the group on timeout or when done."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    return p.returncode, out, err


def roles(tmp_path, *commands):
    """A script running commands[rank] as PMIx rank `rank`."""
    script = tmp_path / "roles.sh"
    cases = "".join(f"  {i}) exec {c} ;;\n" for i, c in enumerate(commands))
    script.write_text(f'#!/bin/sh\ncase "$PMIX_RANK" in\n{cases}  *) exit 3 ;;\nesac\n')
    script.chmod(0o755)
    return str(script)


def run_job(tmp_path, env, workflow, *commands):
    """`maestro run -n len(commands)` of `commands` by rank, for `workflow`; its stdout."""
    env = dict(env, MSTRO_WORKFLOW_NAME=f"{workflow}-{os.getpid()}")
    code, out, err = run([str(MAESTRO), "run", "-n", str(len(commands)), "--", roles(tmp_path, *commands)], env)
    assert code == 0, out + err
    return out


def test_a_python_consumer_of_a_c_producer_under_maestro_run(tmp_path, c_programs, env_for_children):
    out = run_job(
        tmp_path,
        env_for_children,
        "py-c",
        f"{c_programs / 'pm_tool'} --clients 2",
        f"{c_programs / 'producer'} --cdos 8",
        f"{sys.executable} {EXAMPLES / 'python' / 'consumer.py'} --expect 2",
    )
    assert "py-consumer: offer of field-2 from producer (needs ack: 1)" in out
    assert "py-consumer: 2 CDOs, 2097152 bytes, all checksums match" in out
    assert "pm-tool: 2 joined, 2 left; stopping" in out


def test_a_python_producer_for_a_c_consumer_under_maestro_run(tmp_path, c_programs, env_for_children):
    out = run_job(
        tmp_path,
        env_for_children,
        "c-py",
        f"{c_programs / 'pm_tool'} --clients 2",
        f"{sys.executable} {EXAMPLES / 'python' / 'producer.py'} --cdos 8 --size 65536",
        f"{c_programs / 'consumer'} --expect 2",
    )
    assert "py-producer: offered 8 arrays of 65536 bytes in place" in out
    assert "consumer: 2 CDOs, 131072 bytes, all checksums match" in out


def test_a_python_producer_for_a_rust_consumer(tmp_path, env_for_children):
    archiver_bin = REPO / "target" / "debug" / "examples" / "pool_archiver"
    assert archiver_bin.exists(), "build the examples first (cargo build --examples)"
    env = dict(env_for_children, MSTRO_WORKFLOW_NAME=f"py-rust-{os.getpid()}")
    pm = subprocess.Popen(
        [str(MAESTRO), "pm", "--workflow", env["MSTRO_WORKFLOW_NAME"]],
        env=env, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    archiver = None
    try:
        line = pm.stdout.readline()
        assert line.startswith("MSTRO_POOL_MANAGER_INFO;"), line
        env["MSTRO_POOL_MANAGER_INFO"] = line.strip()[len("MSTRO_POOL_MANAGER_INFO;"):-1]
        archive = tmp_path / "archive"
        archiver = subprocess.Popen(
            [str(archiver_bin), "--dir", str(archive), "--selector", "(has .maestro.ecmwf.checksum)", "--count", "4"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        for err_line in archiver.stderr:
            if "archiving offers" in err_line:
                break
        code, out, err = run(
            [sys.executable, str(EXAMPLES / "python" / "producer.py"), "--cdos", "4", "--size", "1048576", "--no-handshake"],
            env,
        )
        assert code == 0, out + err
        archived, _ = archiver.communicate(timeout=60)
        assert archiver.returncode == 0, archived
        assert sorted(l.split()[1] for l in archived.splitlines() if l.startswith("archived ")) == [
            f"field-{i}" for i in range(4)
        ]
        for i in range(4):
            got = np.fromfile(archive / f"field-{i}", dtype=np.float64)
            assert np.array_equal(got, np.arange(1048576 // 8, dtype=np.float64) * (i + 1))
    finally:
        for p in (archiver, pm):
            if p is not None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)
