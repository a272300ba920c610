#!/usr/bin/env bash
# setup.sh -- make sure the Debian 12 packages this project builds and tests against are
# installed (as root it installs what is missing with apt-get; otherwise it prints the exact
# command to run and exits 1), and that the project's Python virtual environment (.venv:
# pytest, NumPy, maturin; nothing is installed system-wide) exists, and mdBook (for the
# book in docs/, `mdbook build docs`) is in cargo's bin directory. With --main, only the
# packages that building and running the main job needs (no test tools, no .venv, no
# mdBook). Safe to run again (does nothing when all is present).
set -euo pipefail

# What building and running the main job needs (scripts/main.sh: `setup.sh --main`).
MAIN_PKGS=(
    pkg-config clang libclang-dev          # bindgen
    libpmix-dev                            # OpenPMIx 4.2
    libfabric-dev                          # libfabric 1.17
    libhwloc-dev libudev-dev               # hwloc 2.9 (hwloc's pkg-config needs -ludev)
    libibnetdisc-dev libibmad-dev          # InfiniBand discovery's headers (loaded at run time)
)

# What the tests need beside it.
TEST_PKGS=(
    libpmix-bin libfabric-bin hwloc        # PMIx, libfabric and hwloc tools
    munge libmunge-dev slurm-wlm           # single-node Slurm for the srun tests
    libslurm-dev                           # slurm/spank.h for the SPANK plugin
    openmpi-bin libopenmpi-dev             # mpirun tests
    iproute2 procps                        # network-namespace tests, process checks
    iperf3                                 # the across-nodes benchmark's reference
    prometheus                             # promtool and a real Prometheus for the metrics tests
    g++ valgrind                           # C API tests: C++ header check, leak check
    python3 python3-venv                   # the Python module and its tests (.venv)
    ibsim-utils infiniband-diags           # a simulated InfiniBand fabric and ibnetdiscover
)

main_only=false
case "${1:-}" in
    --main) main_only=true ;;
    "") ;;
    *)
        echo "setup: unknown option ${1}; usage: setup.sh [--main] (--main: only what the main job needs)" >&2
        exit 2
        ;;
esac
PKGS=("${MAIN_PKGS[@]}")
$main_only || PKGS+=("${TEST_PKGS[@]}")

# The Python packages of .venv, pinned.
PY_PKGS=(pytest==9.2.0 numpy==2.3.5 maturin==1.16.0)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup: missing Debian packages: ${missing[*]}" >&2
        echo "setup: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi
$main_only && exit 0

venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
stamp="$venv/.maestro-packages"
if [[ ! -x $venv/bin/python || $(cat "$stamp" 2>/dev/null) != "${PY_PKGS[*]}" ]]; then
    echo "setup: creating $venv (${PY_PKGS[*]})" >&2
    /usr/bin/python3 -m venv --clear "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${PY_PKGS[@]}"
    echo "${PY_PKGS[*]}" >"$stamp"
fi
# The book's builder, pinned: cargo builds it once (a few minutes) into ~/.cargo/bin.
MDBOOK_VERSION=0.5.4
if [[ $(mdbook --version 2>/dev/null) != "mdbook v$MDBOOK_VERSION" ]]; then
    echo "setup: installing mdbook $MDBOOK_VERSION (cargo install)" >&2
    cargo install --quiet --locked --version "$MDBOOK_VERSION" mdbook
fi
