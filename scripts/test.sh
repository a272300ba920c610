#!/usr/bin/env bash
# test.sh -- every test of the project: installs missing system packages and the Python
# virtual environment (scripts/setup.sh), then runs the unit tests, the multi-process
# integration tests under our own PMIx host, single-node Slurm, Open MPI and network
# namespaces, the C API's tests against the installed library, the doc tests, the
# Python module's pytest suite, and each fuzz target briefly (scripts/fuzz.sh; FUZZ_SECS,
# default 10 s each). Exits non-zero if any of them failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# A build of every target and the test run's installs take about 15 GiB: say so before a
# full disk fails the run half-way.
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if ((free_kib < 20 * 1024 * 1024)); then
    echo "test: only $((free_kib / 1024 / 1024)) GiB free under $PWD; the run needs about 15 GiB (cargo clean frees an old build)" >&2
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    echo "test: installing cargo-nextest" >&2
    cargo install --locked cargo-nextest
fi
# The run must leave the checkout as it found it (a lock file rewritten, a file a test
# wrote): what git says now is compared at the end.
before=$(git status --porcelain 2>/dev/null || true)
cargo build --workspace --all-targets
cargo test --workspace --doc
status=0
cargo nextest run --workspace --all-targets || status=$?
# The Python module as users get it: installed with the library (debug build).
prefix="$PWD/target/pytest-prefix"
scripts/install.sh --debug "$prefix" >/dev/null
echo "test: pytest (maestro_core from $prefix)" >&2
MAESTRO_PREFIX="$prefix" .venv/bin/python -m pytest -q python/tests || status=$?
scripts/fuzz.sh "${FUZZ_SECS:-10}" || status=$?
after=$(git status --porcelain 2>/dev/null || true)
if [[ $after != "$before" ]]; then
    echo "test: the run changed the checkout (git status before and after):" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    status=1
fi
if ((status != 0)); then
    echo "test: FAILED (see above)" >&2
fi
exit "$status"
