#!/bin/sh
# roles.sh -- one job of the C examples, whatever launched it: rank 0 runs the PM tool,
# rank 1 the producer, rank 2 the consumer (the rank comes from PMIx, Open MPI or Slurm).
#
#   cc -o pm_tool pm_tool.c $(pkg-config --cflags --libs maestro)   # and producer, consumer
#   maestro run -n 3 ./roles.sh          # or: srun --mpi=pmix -n 3 ./roles.sh, mpirun -np 3 ./roles.sh
#
# The programs are looked for next to this script, or in $ROLES_EXAMPLES;
# $ROLES_PRODUCER or $ROLES_CONSUMER replace a role's command (the Python examples:
# ROLES_CONSUMER=".venv/bin/python examples/python/consumer.py"). The producer's
# attributes are typed by ecmwf.yaml from the same directory unless MSTRO_SCHEMA_PATH and
# MSTRO_SCHEMA_LIST say otherwise.
here=$(cd "$(dirname "$0")" && pwd)
bin=${ROLES_EXAMPLES:-$here}
: "${MSTRO_SCHEMA_PATH:=$here}" "${MSTRO_SCHEMA_LIST:=ecmwf.yaml}"
export MSTRO_SCHEMA_PATH MSTRO_SCHEMA_LIST
rank=${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-}}}
case "$rank" in
    0) exec "$bin/pm_tool" --clients 2 ;;
    1) exec ${ROLES_PRODUCER:-"$bin/producer" --cdos 8} ;;
    2) exec ${ROLES_CONSUMER:-"$bin/consumer" --expect 2} ;;
    *) echo "roles.sh: rank ${rank:-unknown}: run it as a job of exactly 3 ranks" >&2; exit 3 ;;
esac
