#!/usr/bin/env bash
# main.sh -- the main job: builds the project (release) and runs the producer/consumer
# workflow through the CDO pool on this node under our own PMIx host, `maestro run`: rank 0
# runs the pool manager, ranks 1-2 offer 100 CDOs each (0 B to 64 MiB), rank 3 demands them
# all over libfabric and verifies every checksum. Installs missing system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --bin maestro --examples
exec target/release/maestro run -n 4 --label -- target/release/examples/pool_workflow "$@"
