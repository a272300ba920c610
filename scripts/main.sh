#!/usr/bin/env bash
# main.sh -- the main job: builds the project (release) and runs the producer/consumer
# workflow through the CDO pool on this node under our own PMIx host, `maestro run`: rank 0
# runs the pool manager, ranks 1-2 offer 100 CDOs each (0 B to 64 MiB), rank 3 demands them
# all over libfabric and verifies every checksum. Installs the missing system packages it
# needs first (scripts/setup.sh --main).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --main
# Only the launcher and the workflow (an example of pool-tools: none of the test suite's
# dependencies are built).
cargo build --release -p maestro --bin maestro -p pool-tools --example pool_workflow
exec target/release/maestro run -n 4 --label -- target/release/examples/pool_workflow "$@"
