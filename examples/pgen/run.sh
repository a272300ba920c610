#!/usr/bin/env bash
# The product-generation workflow on one node under `maestro run`: three jobs of their own
# sharing one pool, as ECMWF's are.
#
#   examples/pgen/run.sh [WORKDIR]
#
# - the forecast (4 ranks: rank 0 serves the pool manager, ranks 1-3 offer fields);
# - the archiver (1 rank): copies every field to WORKDIR/archive and offers the copies;
# - the workflow manager (1 rank): starts a product-generation job with PMIx_Spawn for each
#   step once its fields are offered; the last step's only once the forecast has left, so
#   its fields come from the archive.
# Then `pgen verify` checks every archived field and every product (WORKDIR/products).
#
# MAESTRO and PGEN name the binaries (default: target/release of this checkout); PGEN_SHAPE
# the fields (default 4 steps x 3 parameters x 2 levels of 1-16 MiB); PGEN_FORECAST_RANKS
# the forecast's size (default 4); PGEN_PRODUCT_CMD another program for the product jobs
# (the C one, examples/pgen/product.c built as pgen_product); PGEN_JOBS_CMD another program
# for the forecast, the archiver and the manager (the C one, examples/pgen/pgen_c.c built
# as pgen_c, which takes the same options); PGEN_LATE_ARCHIVER seconds
# to start the archiver after the forecast. PGEN_GFS=1 runs no archiver: every job gets
# Maestro's GFS settings (MSTRO_TRANSPORT_DEFAULT=GFS, MSTRO_TRANSPORT_GFS_DIR=WORKDIR/gfs),
# the forecast withdraws its fields once offered, and the pool keeps their files for the
# last step (removed when the pool manager stops). The jobs find the pool
# manager through PMIx by the workflow's name (MSTRO_WORKFLOW_NAME, unique per run), within
# MSTRO_POOL_MANAGER_WAIT.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
MAESTRO=${MAESTRO:-$REPO/target/release/maestro}
PGEN=${PGEN:-$REPO/target/release/examples/pgen}
WORK=${1:-$(mktemp -d -t pgen.XXXXXX)}
RANKS=${PGEN_FORECAST_RANKS:-4}
read -r -a SHAPE <<<"${PGEN_SHAPE:---steps 4 --params 3 --levels 2}"
for b in "$MAESTRO" "$PGEN"; do
    [[ -x $b ]] || { echo "run.sh: $b is not built: cargo build --release --bin maestro --example pgen" >&2; exit 2; }
done
mkdir -p "$WORK"
export MSTRO_WORKFLOW_NAME=${MSTRO_WORKFLOW_NAME:-pgen-$$}
export MSTRO_POOL_MANAGER_WAIT=${MSTRO_POOL_MANAGER_WAIT:-60}
# The attribute schema, for programs (the C product job) that read it from the environment.
export MSTRO_SCHEMA_PATH=${MSTRO_SCHEMA_PATH:-$REPO/examples/pgen} MSTRO_SCHEMA_LIST=${MSTRO_SCHEMA_LIST:-pgen.yaml}
JOBS=${PGEN_JOBS_CMD:-$PGEN}
product=()
[[ -n ${PGEN_PRODUCT_CMD:-} ]] && product=(--product-cmd "$PGEN_PRODUCT_CMD")
archiver=(--archive "$WORK/archive")
if [[ ${PGEN_GFS:-0} == 1 ]]; then
    [[ -z ${PGEN_JOBS_CMD:-} ]] || { echo "run.sh: PGEN_GFS=1 runs the Rust jobs (pgen) only" >&2; exit 2; }
    mkdir -p "$WORK/gfs"
    export MSTRO_TRANSPORT_DEFAULT=GFS MSTRO_TRANSPORT_GFS_DIR=$WORK/gfs
    archiver=()
fi
without=()
((${#archiver[@]})) || without=(--without-archiver)

# Each job runs in the background; its pid is kept to wait for it (and to stop it if this
# script is stopped: no job outlives the run).
# Each job's output goes through a labeller (`[name] ` before each line), waited for at
# the end so that no line is lost when the script ends right after a job.
pids=()
labellers=()
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap 'stop; exit 130' INT TERM
job() {
    local name=$1 out
    shift
    exec {out}> >(sed "s/^/[$name] /")
    labellers+=($!)
    "$MAESTRO" run "$@" >&"$out" 2>&1 &
    pids+=($!)
    # The job holds the labeller's input now: it ends with the job.
    exec {out}>&-
}
job forecast -n "$RANKS" -- "$JOBS" forecast "${SHAPE[@]}" "${without[@]}"
# The archiver may come late (PGEN_LATE_ARCHIVER seconds): it hears of what was offered
# before it came, and holds every offer after.
if ((${#archiver[@]})); then
    sleep "${PGEN_LATE_ARCHIVER:-0}"
    job archiver -n 1 -- "$JOBS" archiver "${SHAPE[@]}" --dir "$WORK/archive"
fi
job manager -n 1 -- "$JOBS" manager "${SHAPE[@]}" --out "$WORK/products" \
    --producers $((RANKS - 1)) --hold-last "${product[@]}" "${without[@]}"
# A job that fails stops the others (they would wait for it up to MSTRO_TIMEOUT).
failed=0
live=("${pids[@]}")
while ((${#live[@]})); do
    ended=
    if ! wait -n -p ended "${live[@]}"; then
        ((failed)) || stop
        failed=1
    fi
    for i in "${!live[@]}"; do [[ ${live[i]} == "$ended" ]] && unset 'live[i]'; done
done
wait "${labellers[@]}" 2>/dev/null || true
((failed == 0)) || { echo "run.sh: a job failed (see above)" >&2; exit 1; }
"$PGEN" verify "${SHAPE[@]}" "${archiver[@]}" --out "$WORK/products"
if ((${#archiver[@]})); then
    echo "run.sh: products in $WORK/products, archive in $WORK/archive"
else
    left=$(find "$WORK/gfs" -mindepth 1 | wc -l)
    echo "run.sh: products in $WORK/products; $left files left in $WORK/gfs"
fi
