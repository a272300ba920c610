#!/usr/bin/env bash
# The product-generation workflow on a Slurm cluster: the forecast, the archiver and the
# workflow manager are batch jobs of their own, and the manager submits one more batch job
# per step (each in its own allocation) as soon as the step's fields are all offered.
#
#   examples/pgen/slurm.sh WORKDIR
#
# WORKDIR must be on a file system every node sees: the forecast's rank 0 writes the pool
# manager's info there (WORKDIR/pm.info, mode 0600), which the other jobs read through
# MSTRO_POOL_MANAGER_INFO_FILE (the secret never appears on a command line or in a log);
# the archive (WORKDIR/archive), the products (WORKDIR/products) and every job's output
# go there too. At the end `pgen verify` checks every archived field and every product.
#
# Settings (environment):
#   PGEN                  the pgen binary (default: target/release/examples/pgen)
#   PGEN_JOBS_CMD         another program for the forecast, the archiver and the manager
#                         (the C one, examples/pgen/pgen_c.c built as pgen_c)
#   PGEN_PRODUCT_CMD      another program for the product jobs (pgen_product, product.c)
#   PGEN_SHAPE            the fields (default: 4 steps x 3 parameters x 2 levels, 1-16 MiB)
#   PGEN_FORECAST_SBATCH  the forecast's allocation (default: -N 4 -n 8)
#   PGEN_SERVICE_SBATCH   the archiver's and the manager's (default: -n 1)
#   PGEN_ARCHIVER_SBATCH  the archiver's alone (default: PGEN_SERVICE_SBATCH), e.g. with
#                         --begin=now+10 for an archiver that comes late
#   PGEN_PRODUCT_SBATCH   each product job's (default: -n 1)
#   PGEN_TIMEOUT          seconds to wait for the whole workflow (default 900)
#   PGEN_PM_SBATCH        run the pool manager as a job of its own with this allocation
#                         (e.g. -n 1 -w n5; `maestro pm`, listening on every interface)
#                         instead of in the forecast's rank 0 (the Rust pgen only)
#   PGEN_STANDBY_SBATCH   with PGEN_PM_SBATCH: a standby pool manager's job (e.g. -n 1
#                         -w n6), which takes over if the first dies
#   PGEN_PM_SHARDS        with PGEN_PM_SBATCH: the pool's shards, one per task of the
#                         pool manager's job (e.g. PGEN_PM_SBATCH="-N 4 -n 4 -w n5,n6,n7,n8"
#                         PGEN_PM_SHARDS=4: `maestro pm --shards 4` under srun)
#   MAESTRO               the maestro binary (default: target/release/maestro)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PGEN=${PGEN:-$REPO/target/release/examples/pgen}
JOBS=${PGEN_JOBS_CMD:-$PGEN}
WORK=${1:?usage: slurm.sh WORKDIR (on a file system every node sees)}
read -r -a SHAPE <<<"${PGEN_SHAPE:---steps 4 --params 3 --levels 2}"
read -r -a FORECAST <<<"${PGEN_FORECAST_SBATCH:--N 4 -n 8}"
read -r -a SERVICE <<<"${PGEN_SERVICE_SBATCH:--n 1}"
read -r -a ARCHIVER <<<"${PGEN_ARCHIVER_SBATCH:-${SERVICE[*]}}"
read -r -a PRODUCT <<<"${PGEN_PRODUCT_SBATCH:--n 1}"
TIMEOUT=${PGEN_TIMEOUT:-900}
MAESTRO=${MAESTRO:-$REPO/target/release/maestro}
read -r -a PM_JOB <<<"${PGEN_PM_SBATCH:-}"
read -r -a STANDBY_JOB <<<"${PGEN_STANDBY_SBATCH:-}"
if ((${#STANDBY_JOB[@]})) && ! ((${#PM_JOB[@]})); then
    echo "slurm.sh: PGEN_STANDBY_SBATCH stands by for the pool manager's own job: set PGEN_PM_SBATCH too" >&2
    exit 2
fi
if [[ -n ${PGEN_PM_SHARDS:-} ]] && { ! ((${#PM_JOB[@]})) || ((${#STANDBY_JOB[@]})); }; then
    echo "slurm.sh: PGEN_PM_SHARDS shards the pool manager's own job: set PGEN_PM_SBATCH (with as many tasks), and no PGEN_STANDBY_SBATCH" >&2
    exit 2
fi
if ((${#PM_JOB[@]})) && [[ -n ${PGEN_JOBS_CMD:-} ]]; then
    echo "slurm.sh: PGEN_PM_SBATCH needs the Rust pgen's forecast (its rank 0 joins the PM's job); unset PGEN_JOBS_CMD" >&2
    exit 2
fi
if ((${#PM_JOB[@]})) && [[ ! -x $MAESTRO ]]; then
    echo "slurm.sh: $MAESTRO is not built: cargo build --release (or set MAESTRO)" >&2
    exit 2
fi
[[ -x $PGEN ]] || { echo "slurm.sh: $PGEN is not built: cargo build --release --example pgen" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "slurm.sh: no sbatch here: run it where Slurm jobs are submitted" >&2; exit 2; }
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
rm -f "$WORK/pm.info"
export MSTRO_WORKFLOW_NAME=${MSTRO_WORKFLOW_NAME:-pgen-$$}
# The attribute schema, for programs (the C ones) that read it from the environment.
export MSTRO_SCHEMA_PATH=${MSTRO_SCHEMA_PATH:-$REPO/examples/pgen} MSTRO_SCHEMA_LIST=${MSTRO_SCHEMA_LIST:-pgen.yaml}
INFO="MSTRO_POOL_MANAGER_INFO_FILE=$WORK/pm.info"

submit() { # NAME SBATCH-ARGS... -- COMMAND...: the job's id
    local name=$1 args=()
    shift
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    sbatch --parsable --job-name "pgen-$name" -o "$WORK/$name.out" "${args[@]}" \
        --wrap "srun --mpi=pmix $(printf '%q ' "$@")"
}
ranks() { # the forecast's number of tasks, from its sbatch arguments
    local i
    for ((i = 0; i < ${#FORECAST[@]}; i++)); do
        [[ ${FORECAST[i]} == -n || ${FORECAST[i]} == --ntasks ]] && { echo "${FORECAST[i + 1]}"; return; }
    done
    echo "slurm.sh: give the forecast's task count with -n in PGEN_FORECAST_SBATCH" >&2
    exit 2
}
producers=$(($(ranks) - 1))
# An allocation the cluster can never give (more nodes than the partition has) would stay
# pending until the timeout: asked of Slurm first (sbatch --test-only), and said.
fits() { # WHAT VARIABLE SBATCH-ARGS...
    local what=$1 var=$2 said
    shift 2
    if ! said=$(sbatch --test-only "$@" --wrap true 2>&1); then
        echo "slurm.sh: the $what's allocation ($*) is more than this cluster gives: ${said#sbatch: error: }; set $var (e.g. -N 1 -n 4)" >&2
        exit 2
    fi
}
fits forecast PGEN_FORECAST_SBATCH "${FORECAST[@]}"
fits archiver PGEN_ARCHIVER_SBATCH "${ARCHIVER[@]}"
fits manager PGEN_SERVICE_SBATCH "${SERVICE[@]}"
fits "product job" PGEN_PRODUCT_SBATCH "${PRODUCT[@]}"
((${#PM_JOB[@]})) && fits "pool manager" PGEN_PM_SBATCH "${PM_JOB[@]}"
((${#STANDBY_JOB[@]})) && fits "standby pool manager" PGEN_STANDBY_SBATCH "${STANDBY_JOB[@]}"

jobs=()
pm_jobs=()
pm_job() { # NAME SBATCH-ARGS... -- MAESTRO-PM-ARGS...: a pool manager's job (not a PMIx app)
    local name=$1 args=()
    shift
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    local run=(exec)
    # Shards: one per task of the job, each a PMIx app of it (they exchange their addresses).
    [[ -n ${PGEN_PM_SHARDS:-} ]] && run=(exec srun --mpi=pmix) && set -- --shards "$PGEN_PM_SHARDS" "$@"
    sbatch --parsable --job-name "pgen-$name" -o "$WORK/$name.out" "${args[@]}" \
        --wrap "${run[*]} $(printf '%q ' "$MAESTRO" pm --workflow "$MSTRO_WORKFLOW_NAME" --listen 0.0.0.0:0 "$@")"
}
if ((${#PM_JOB[@]})); then
    pm_jobs+=("$(pm_job pm "${PM_JOB[@]}" -- --info-file "$WORK/pm.info")")
    for _ in $(seq 600); do [[ -s $WORK/pm.info ]] && break; sleep 0.1; done
    [[ -s $WORK/pm.info ]] || { echo "slurm.sh: the pool manager's job wrote no $WORK/pm.info in 60 s (see $WORK/pm.out)" >&2; scancel "${pm_jobs[@]}"; exit 1; }
    ((${#STANDBY_JOB[@]})) && pm_jobs+=("$(pm_job standby "${STANDBY_JOB[@]}" -- --standby-for "$WORK/pm.info")")
    jobs+=("$(submit forecast "${FORECAST[@]}" --export="ALL,$INFO" -- "$JOBS" forecast "${SHAPE[@]}")")
else
    jobs+=("$(submit forecast "${FORECAST[@]}" -- "$JOBS" forecast "${SHAPE[@]}" --info-file "$WORK/pm.info")")
fi
jobs+=("$(submit archiver "${ARCHIVER[@]}" --export="ALL,$INFO" -- \
    "$JOBS" archiver "${SHAPE[@]}" --dir "$WORK/archive")")
product_args=()
for a in "${PRODUCT[@]}" -o "$WORK/product-%j.out"; do product_args+=(--sbatch-arg "$a"); done
[[ -n ${PGEN_PRODUCT_CMD:-} ]] && product_args+=(--product-cmd "$PGEN_PRODUCT_CMD")
jobs+=("$(submit manager "${SERVICE[@]}" --export="ALL,$INFO" -- \
    "$JOBS" manager "${SHAPE[@]}" --launch sbatch "${product_args[@]}" \
    --out "$WORK/products" --producers "$producers" --hold-last)")
echo "slurm.sh: forecast, archiver and manager are jobs ${jobs[*]}${pm_jobs[*]:+, the pool manager ${pm_jobs[*]}}; output in $WORK"

# No job outlives the script: stopped (or timed out), it cancels them and their products.
cancel() {
    scancel "${jobs[@]}" 2>/dev/null || true
    scancel --name "$(product_names)" 2>/dev/null || true
    ((${#pm_jobs[@]} == 0)) || scancel "${pm_jobs[@]}" 2>/dev/null || true
}
product_names() {
    local s names=() steps
    steps=$(printf '%s\n' "${SHAPE[@]}" | awk 'p {print; exit} /^--steps$/ {p=1}')
    for ((s = 0; s < ${steps:-4}; s++)); do names+=("pgen-s$s"); done
    local IFS=,
    echo "${names[*]}"
}
trap 'cancel; exit 130' INT TERM
deadline=$((SECONDS + TIMEOUT))
while [[ -n $(squeue -h -j "$(IFS=,; echo "${jobs[*]}")" 2>/dev/null) || -n $(squeue -h -n "$(product_names)" 2>/dev/null) ]]; do
    if ((SECONDS > deadline)); then
        echo "slurm.sh: the workflow did not end within $TIMEOUT s (PGEN_TIMEOUT); its jobs then:" >&2
        squeue -h -o '  job %i %j: %T (%r)' -j "$(IFS=,; echo "${jobs[*]}")" >&2 2>/dev/null || true
        echo "slurm.sh: cancelling it" >&2
        cancel
        exit 1
    fi
    sleep 1
done
failed=0
for j in "${jobs[@]}"; do
    state=$(scontrol show job "$j" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || echo "JobState=UNKNOWN")
    [[ $state == JobState=COMPLETED ]] || { echo "slurm.sh: job $j: $state (see $WORK/*.out)" >&2; failed=1; }
done
# The workflow is over: its pool manager (and standby) stop.
((${#pm_jobs[@]} == 0)) || scancel "${pm_jobs[@]}" 2>/dev/null || true
((failed == 0)) || exit 1
"$PGEN" verify "${SHAPE[@]}" --archive "$WORK/archive" --out "$WORK/products"
echo "slurm.sh: products in $WORK/products, archive in $WORK/archive"
