"""maestro_core against other processes and languages: a Python consumer of a C producer
and a Python producer for a C consumer (one job under maestro run, the PM found through
PMIx), a Python producer for a Rust consumer (pool_archiver) with maestro pm, and a C
consumer mapping a Python producer's library memory."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
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
    subprocess.run(
        ["cc", "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-o", str(out / "layout"), str(REPO / "tests" / "c" / "layout.c")]
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


FORTRAN_CONSUMER = """
import numpy as np
import maestro_core as M

with M.pool(component="py-fortran"):
    a = np.zeros((2, 3), dtype=np.int32, order="F")
    c = M.mstro_cdo_declare("matrix", None)
    M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, a)
    M.mstro_cdo_demand(c)
    print("py-fortran:", a.tolist(), a.ravel(order="K").tolist(), flush=True)
    M.mstro_cdo_dispose(c)
    d = M.mstro_cdo_declare("layout-done", None)
    M.mstro_cdo_seal(d)
    M.mstro_cdo_offer(d)
    M.mstro_cdo_withdraw(d)
    M.mstro_cdo_dispose(d)
"""


@pytest.mark.parametrize("through_files", [False, True], ids=["fabric", "gfs"])
def test_a_fortran_order_numpy_consumer_of_a_c_producer_gets_its_order(tmp_path, c_programs, env_for_children, through_files):
    """Under maestro run, by the fabric and through the global file system (Maestro's
    settings; nothing is left in the directory after the job)."""
    script = tmp_path / "fortran_consumer.py"
    script.write_text(FORTRAN_CONSUMER)
    env = dict(env_for_children)
    gfs = tmp_path / "gfs"
    if through_files:
        gfs.mkdir()
        env.update(MSTRO_TRANSPORT_DEFAULT="GFS", MSTRO_TRANSPORT_GFS_DIR=str(gfs))
    out = run_job(
        tmp_path,
        env,
        "py-layout",
        f"{c_programs / 'pm_tool'} --clients 2",
        f"{c_programs / 'layout'} producer",
        f"{sys.executable} {script}",
    )
    # The same matrix, stored in Fortran order: 0 3 1 4 2 5 in memory.
    assert "py-fortran: [[0, 1, 2], [3, 4, 5]] [0, 3, 1, 4, 2, 5]" in out, out
    assert "layout: all hold" in out, out
    if through_files:
        assert list(gfs.iterdir()) == []


@contextlib.contextmanager
def processes(env):
    """Starts `maestro pm` for a fresh workflow; yields (the clients' environment, a function
    starting more processes); stops them all, by process group, at the end."""
    env = dict(env, MSTRO_WORKFLOW_NAME=f"py-pm-{os.getpid()}-{time.monotonic_ns()}")
    started = []

    def spawn(cmd, **kw):
        p = subprocess.Popen(cmd, env=env, text=True, start_new_session=True, **kw)
        started.append(p)
        return p

    try:
        pm = spawn([str(MAESTRO), "pm", "--print-info", "--workflow", env["MSTRO_WORKFLOW_NAME"]], stdout=subprocess.PIPE)
        line = wait_for(pm.stdout, "MSTRO_POOL_MANAGER_INFO;")
        env["MSTRO_POOL_MANAGER_INFO"] = line.strip()[len("MSTRO_POOL_MANAGER_INFO;"):-1]
        yield env, spawn
    finally:
        for p in reversed(started):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def wait_for(stream, text, timeout=60):
    """Reads `stream` until a line contains `text` and returns that line; fails after
    `timeout` seconds."""
    found = []
    done = threading.Event()

    def read():
        for line in stream:
            if text in line:
                found.append(line)
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout) and found, f"no line with {text!r} within {timeout} s"
    return found[0]


def example(name):
    """A Rust example's binary (built by `cargo build --examples`)."""
    path = REPO / "target" / "debug" / "examples" / name
    assert path.exists(), "build the examples first (cargo build --examples)"
    return str(path)


def test_a_python_producer_for_a_rust_consumer(tmp_path, env_for_children):
    with processes(env_for_children) as (env, spawn):
        archive = tmp_path / "archive"
        archiver = spawn(
            [example("pool_archiver"), "--dir", str(archive), "--selector", "(has .maestro.ecmwf.checksum)", "--count", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        wait_for(archiver.stderr, "archiving offers")
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


def test_library_memory_of_a_python_producer_is_mapped_by_a_c_consumer(c_programs, env_for_children):
    size = 16 << 20  # mapped on 4 KiB pages too
    with processes(env_for_children) as (env, spawn):
        tracer = spawn([example("pool_tracer"), "--kinds", "transport-completed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(tracer.stderr, "subscribed")
        consumer = spawn([str(c_programs / "consumer"), "--expect", "2"], stdout=subprocess.PIPE)
        code, out, err = run(
            [sys.executable, str(EXAMPLES / "python" / "producer.py"), "--cdos", "8", "--size", str(size), "--library-memory"],
            env,
        )
        assert code == 0, out + err
        assert f"py-producer: offered 8 arrays of {size} bytes from library memory" in out
        consumed, _ = consumer.communicate(timeout=60)
        assert f"consumer: 2 CDOs, {2 * size} bytes, all checksums match" in consumed, consumed
        # Both transfers ended before the consumer did; the tracer printed their events.
        os.killpg(tracer.pid, signal.SIGTERM)
        traced, _ = tracer.communicate(timeout=30)
        assert traced.count("mapped: no copy") == 2, traced


def test_gfs_settings_move_a_python_producers_arrays_through_files(tmp_path, c_programs, env_for_children):
    """Maestro's MSTRO_TRANSPORT_DEFAULT=GFS and MSTRO_TRANSPORT_GFS_DIR: the Python
    producer's arrays go through files the C consumer reads (the transport events say so),
    and the directory is empty afterwards."""
    gfs = tmp_path / "gfs"
    gfs.mkdir()
    env = dict(env_for_children, MSTRO_TRANSPORT_DEFAULT="GFS", MSTRO_TRANSPORT_GFS_DIR=str(gfs))
    with processes(env) as (env, spawn):
        tracer = spawn([example("pool_tracer"), "--kinds", "transport-started"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(tracer.stderr, "subscribed")
        consumer = spawn([str(c_programs / "consumer"), "--expect", "2"], stdout=subprocess.PIPE)
        code, out, err = run(
            [sys.executable, str(EXAMPLES / "python" / "producer.py"), "--cdos", "8", "--size", "65536"],
            env,
        )
        assert code == 0, out + err
        consumed, _ = consumer.communicate(timeout=60)
        assert "consumer: 2 CDOs, 131072 bytes, all checksums match" in consumed, consumed
        os.killpg(tracer.pid, signal.SIGTERM)
        traced, _ = tracer.communicate(timeout=30)
        assert traced.count("gfs (the file " + str(gfs)) >= 2, traced
    assert list(gfs.iterdir()) == []


FORECAST = """
import numpy as np
import maestro_core as M
with M.pool(component="forecast"):
    for i in range(3):
        a = np.arange(4096, dtype=np.float64) * (i + 1)
        cdo = M.mstro_cdo_declare(f"t2m-{i}", None)
        M.mstro_cdo_attribute_set(cdo, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, a)
        M.mstro_cdo_attribute_set(cdo, M.MSTRO_ATTR_CORE_CDO_PERSIST, i == 2)
        M.mstro_cdo_seal(cdo)
        M.mstro_cdo_offer(cdo)
        M.mstro_cdo_withdraw(cdo)
        M.mstro_cdo_dispose(cdo)
print("forecast: withdrew everything", flush=True)
"""

PRODUCTS = """
import numpy as np
import maestro_core as M
with M.pool(component="products"):
    for i in range(3):
        cdo = M.mstro_cdo_declare(f"t2m-{i}", None)
        M.mstro_cdo_demand(cdo)
        got = np.frombuffer(M.mstro_cdo_access_ptr(cdo), dtype=np.float64)
        assert np.array_equal(got, np.arange(4096, dtype=np.float64) * (i + 1)), i
        provider = M.mstro_cdo_attribute_get(cdo, M.MSTRO_ATTR_CORE_CDO_PROVIDER)
        print(f"products: t2m-{i} from {provider}", flush=True)
        M.mstro_cdo_dispose(cdo)
"""


def test_a_python_producers_arrays_outlive_it_through_the_pools_files(tmp_path, env_for_children):
    """Data that outlives its producer: with the GFS settings (the PM too), a Python
    producer offers three arrays, withdraws and disposes them at once and ends; a Python
    consumer started afterwards gets all three from the pool, naming the producer as their
    provider. When the PM stops only the array marked to persist is left."""
    gfs = tmp_path / "gfs"
    gfs.mkdir()
    env = dict(env_for_children, MSTRO_TRANSPORT_DEFAULT="GFS", MSTRO_TRANSPORT_GFS_DIR=str(gfs))
    with processes(env) as (env, spawn):
        code, out, err = run([sys.executable, "-c", FORECAST], env)
        assert code == 0, out + err
        assert "forecast: withdrew everything" in out
        code, out, err = run([sys.executable, "-c", PRODUCTS], env)
        assert code == 0, out + err
        assert out.count("from forecast:0") == 3, out
        workflow = env["MSTRO_WORKFLOW_NAME"]
    assert [p.name for p in gfs.iterdir()] == [f"maestro-persist-{workflow}"]
    persisted = gfs / f"maestro-persist-{workflow}"
    assert sorted(p.name for p in persisted.iterdir()) == ["t2m-2", "t2m-2.maestro.json"]
    assert np.array_equal(np.fromfile(persisted / "t2m-2", dtype=np.float64), np.arange(4096, dtype=np.float64) * 3)
    described = json.loads((persisted / "t2m-2.maestro.json").read_text())
    assert (described["name"], described["size"], described["provider"]) == ("t2m-2", 4096 * 8, "forecast:0")


def test_a_consumer_demanding_as_told_is_served_by_the_leases_of_the_offer_events(env_for_children):
    """ECMWF's syphon: demands each CDO as its offer event arrives. Every transfer is
    started by the lease that came with the event (the transport events say so): no
    round trip to the pool manager before the copy."""
    with processes(env_for_children) as (env, spawn):
        tracer = spawn([example("pool_tracer"), "--kinds", "transport-started"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(tracer.stderr, "subscribed")
        consumer = spawn(
            [sys.executable, str(EXAMPLES / "python" / "consumer.py"), "--expect", "2", "--as-told"],
            stdout=subprocess.PIPE,
        )
        code, out, err = run(
            [sys.executable, str(EXAMPLES / "python" / "producer.py"), "--cdos", "8", "--size", "65536"], env
        )
        assert code == 0, out + err
        consumed, _ = consumer.communicate(timeout=60)
        assert consumer.returncode == 0, consumed
        assert "py-consumer: 2 CDOs, 131072 bytes, all checksums match" in consumed, consumed
        os.killpg(tracer.pid, signal.SIGTERM)
        traced, _ = tracer.communicate(timeout=30)
        started = [l for l in traced.splitlines() if "field-" in l]
        assert len(started) == 2 and all("by a lease" in l for l in started), traced


def test_the_readme_snippet_runs_as_written(tmp_path, env_for_children):
    """The Python chapter's snippet (docs/guide/python.md), verbatim, as a user would paste it."""
    section = (REPO / "docs" / "guide" / "python.md").read_text()
    snippet = section[section.index("```python\n") + len("```python\n") :]
    snippet = snippet[: snippet.index("```")]
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    code, out, err = run([sys.executable, str(script)], env_for_children, timeout=60)
    assert code == 0, out + err
    assert out.strip() == "8388608 bytes, equal", out + err


def test_the_syphon_rides_out_a_killed_pm_restarted_with_reclaim(tmp_path, env_for_children):
    """ECMWF's syphon and a producer, unchanged, survive `kill -9` of their pool manager
    mid-run: the PM restarted with `maestro pm --reclaim` takes over, they rejoin it
    (MSTRO_PM_RECLAIM_TIMEOUT's default holds their calls) and every checksum matches."""
    workflow = f"py-failover-{os.getpid()}"
    info = tmp_path / "wf.info"
    env = dict(env_for_children, MSTRO_WORKFLOW_NAME=workflow, MSTRO_POOL_MANAGER_INFO_FILE=str(info))
    started = []

    def spawn(cmd, **kw):
        p = subprocess.Popen(cmd, env=env, text=True, start_new_session=True, **kw)
        started.append(p)
        return p

    pm_cmd = [str(MAESTRO), "pm", "--workflow", workflow, "--info-file", str(info)]
    try:
        pm = spawn(pm_cmd, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not info.exists():
            assert time.monotonic() < deadline, "the PM wrote no info file"
            time.sleep(0.05)
        consumer = spawn(
            [sys.executable, str(EXAMPLES / "python" / "consumer.py"), "--expect", "2", "--as-told"],
            stdout=subprocess.PIPE,
        )
        producer = spawn(
            [sys.executable, str(EXAMPLES / "python" / "producer.py"), "--cdos", "8", "--size", "65536"],
            stdout=subprocess.PIPE,
        )
        time.sleep(1.0)
        os.kill(pm.pid, signal.SIGKILL)
        time.sleep(0.1)
        spawn(pm_cmd + ["--reclaim", "--grace", "2"], stderr=subprocess.DEVNULL)
        produced, _ = producer.communicate(timeout=120)
        assert producer.returncode == 0, produced
        consumed, _ = consumer.communicate(timeout=120)
        assert consumer.returncode == 0, consumed
        assert "py-consumer: 2 CDOs, 131072 bytes, all checksums match" in consumed, consumed
    finally:
        for p in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
