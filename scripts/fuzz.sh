#!/usr/bin/env bash
# fuzz.sh -- runs the cargo-fuzz targets (fuzz/fuzz_targets/) on what the pool reads from
# outside: frames, selectors, PM info, schemas.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      default: 60 s each, every target
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0 frames   stop after a number of runs instead
#   FUZZ_ARGS="-max_len=128" scripts/fuzz.sh ...  more libFuzzer flags
#
# Installs cargo-fuzz if missing. libFuzzer needs the compiler's instrumentation flags,
# which stable Rust accepts with RUSTC_BOOTSTRAP=1 (set only for these builds); no
# sanitizer (the code under test is safe Rust: a bug shows as a panic). The corpus grows
# in target/fuzz-corpus/<target> from the seeds in fuzz/seeds/<target> (with the
# dictionary fuzz/dicts/<target>.dict where there is one); a crash is saved
# in fuzz/artifacts/<target>/ and makes this script fail. Prints each target's runs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
    targets=(frames selector pm_info schema)
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz@0.13.2
fi
export RUSTC_BOOTSTRAP=1
flags=(--sanitizer none --release --debug-assertions)
cargo fuzz build "${flags[@]}" >&2
status=0
for t in "${targets[@]}"; do
    corpus="target/fuzz-corpus/$t"
    mkdir -p "$corpus" "fuzz/seeds/$t"
    limit=(-max_total_time="$secs")
    if [[ -n "${FUZZ_RUNS:-}" ]]; then
        limit=(-runs="$FUZZ_RUNS")
    fi
    log="target/fuzz-$t.log"
    dict=()
    if [[ -f "fuzz/dicts/$t.dict" ]]; then
        dict=(-dict="fuzz/dicts/$t.dict")
    fi
    if cargo fuzz run "${flags[@]}" "$t" "$corpus" "fuzz/seeds/$t" -- \
        "${limit[@]}" "${dict[@]}" ${FUZZ_ARGS:-} -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
        echo "fuzz: $t: ${runs:-?} runs, no finding"
    else
        status=1
        echo "fuzz: $t: FOUND A CRASH (see $log and fuzz/artifacts/$t/):" >&2
        grep -A3 "panicked" "$log" >&2 || tail -20 "$log" >&2
    fi
done
exit "$status"
