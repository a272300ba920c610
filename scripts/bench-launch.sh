#!/usr/bin/env bash
# bench-launch.sh -- time `maestro run -n N` of a trivial PMIx client against
# `mpirun -np N` of the same program, alternating, RUNS times each (default 10, N=3).
# Prints each run and the medians. Needs a release build: cargo build --release --examples.
#
#   scripts/bench-launch.sh [RUNS] [N]
#   MSTRO_INVENTORY_CACHE=0 scripts/bench-launch.sh   # without the inventory cache
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
n="${2:-3}"
maestro=target/release/maestro
hello=target/release/examples/pmix_hello
for f in "$maestro" "$hello"; do
    [[ -x "$f" ]] || { echo "bench-launch: $f missing: cargo build --release --examples" >&2; exit 2; }
done
mpi=(mpirun -np "$n" --oversubscribe)
if [[ "$(id -u)" == 0 ]]; then
    mpi+=(--allow-run-as-root)
fi
seconds() {
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", b - a }'
}
ours=()
theirs=()
for ((i = 0; i < runs; i++)); do
    ours+=("$(seconds "$maestro" run -n "$n" "$hello")")
    theirs+=("$(seconds "${mpi[@]}" "$hello")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf 'maestro run -n %s: %s\n' "$n" "$(printf '%.3f ' "${ours[@]}")"
printf 'mpirun -np %s:      %s\n' "$n" "$(printf '%.3f ' "${theirs[@]}")"
m_ours=$(median "${ours[@]}")
m_theirs=$(median "${theirs[@]}")
awk -v a="$m_ours" -v b="$m_theirs" \
    'BEGIN { printf "medians: maestro run %.3f s, mpirun %.3f s, ratio %.2f\n", a, b, a / b }'
