#!/usr/bin/env bash
# main.sh -- the main job: builds the project (release) and runs a workflow on this node
# under our own PMIx host, `maestro run`. Installs missing system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --bin maestro --examples
exec target/release/maestro run -n 3 --label -- target/release/examples/pmix_hello
