#!/usr/bin/env bash
# test.sh -- every test of the project: installs missing system packages (scripts/setup.sh),
# then runs the unit tests, the multi-process integration tests under our own PMIx host,
# single-node Slurm and Open MPI, and the doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if ! cargo nextest --version >/dev/null 2>&1; then
    echo "test: installing cargo-nextest" >&2
    cargo install --locked cargo-nextest
fi
cargo build --workspace --all-targets
cargo test --workspace --doc
# nextest last: its summary line closes the run.
cargo nextest run --workspace --all-targets
