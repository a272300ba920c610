#!/usr/bin/env bash
# bench-nodes.sh -- the pool across two nodes, side by side with its references: a 2-node
# cluster of scripts/cluster.sh (network namespaces joined by a bridge: veth, TCP), the
# consumer and the pool manager on n1, the provider on n2 (`maestro bench pool --launcher`),
# `iperf3` between the same two nodes, and Open MPI's send/recv with one rank on each node
# (`mpirun --host n1,n2` with `cluster.sh rsh` as its launch agent).
#
#   scripts/bench-nodes.sh [--sizes LIST] [--window N] [--volume BYTES] [--json FILE]
#                          [-- MORE OPTIONS OF maestro bench pool, e.g. --progress spin, --events]
#
# Prints one table: per size the pool's demand p50, its bandwidth, bare libfabric's
# (fi_read between the same nodes: the provider's ceiling), Open MPI's, and the pool's over
# each and over iperf3's single-stream bandwidth measured in the same run; with --events,
# also the event-driven stream (fresh CDOs demanded as their offer events arrive), it over
# MPI and each party's CPU per CDO. Needs root (namespaces)
# and the packages of scripts/setup.sh (run it first); builds the release binary.
# Everything it starts (the cluster, iperf3's server) is stopped on exit, by PID.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SIZES=8,64K,1M,16M,64M
WINDOW=1
VOLUME=1G
JSON=
MORE=()
while (($#)); do
    case $1 in
        --sizes) SIZES=${2:?--sizes needs a list}; shift 2 ;;
        --window) WINDOW=${2:?--window needs a number}; shift 2 ;;
        --volume) VOLUME=${2:?--volume needs a size}; shift 2 ;;
        --json) JSON=${2:?--json needs a file}; shift 2 ;;
        --) shift; MORE=("$@"); break ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "bench-nodes: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "bench-nodes: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (network and mount namespaces); run as root"
for tool in iperf3 mpirun mpicc python3; do
    command -v "$tool" >/dev/null || die "$tool is missing: run scripts/setup.sh (as root) first"
done

cd "$REPO"
cargo build --release -p maestro -p maestro-bench >&2
MAESTRO=$REPO/target/release/maestro

# A cluster of its own, in a directory of its own (shared into both nodes).
export CLUSTER_NODES=2 CLUSTER_DIR
CLUSTER_DIR=$(mktemp -d /var/tmp/maestro-bench-nodes.XXXXXX)
CLUSTER="$REPO/scripts/cluster.sh"
IPERF_PID=
cleanup() {
    [[ -n $IPERF_PID ]] && kill "$IPERF_PID" 2>/dev/null && wait "$IPERF_PID" 2>/dev/null
    "$CLUSTER" stop >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$CLUSTER" start >/dev/null
N1=198.18.7.1
N2=198.18.7.2

# iperf3: one TCP stream from n2 to n1 for 10 s (the direction the CDOs travel).
"$CLUSTER" exec 1 iperf3 --server --one-off --bind "$N1" >/dev/null &
IPERF_PID=$!
for _ in $(seq 50); do
    "$CLUSTER" exec 1 sh -c "ss -ltn | grep -q '$N1:5201'" && break
    sleep 0.1
done
IPERF_JSON=$CLUSTER_DIR/iperf3.json
"$CLUSTER" exec 2 iperf3 --client "$N1" --time 10 --json >"$IPERF_JSON"
wait "$IPERF_PID" || true
IPERF_PID=

# The pool and Open MPI: the program MPI builds must be at the same path on both nodes.
POOL_JSON=$CLUSTER_DIR/pool.json
mkdir -p "$CLUSTER_DIR/tmp"
TMPDIR=$CLUSTER_DIR/tmp "$CLUSTER" exec 1 "$MAESTRO" bench pool \
    --provider 'tcp;ofi_rxm' --iface eth0 --listen "$N1:0" \
    --launcher "$CLUSTER exec 2" \
    --sizes "$SIZES" --window "$WINDOW" --volume "$VOLUME" \
    --mpi --mpi-hosts n1,n2 --mpi-agent "$CLUSTER rsh" --json "${MORE[@]}" >"$POOL_JSON"

python3 - "$IPERF_JSON" "$POOL_JSON" "$WINDOW" "$JSON" <<'PY'
import json, sys
iperf = json.load(open(sys.argv[1]))
pool = json.load(open(sys.argv[2]))
window, out = sys.argv[3], sys.argv[4]
ref = iperf["end"]["sum_received"]["bits_per_second"] / 8e9
print(f"n2 -> n1 over veth (tcp;ofi_rxm, progress {pool['progress']}), {window} demand(s) in flight; "
      f"iperf3: {ref:.3f} GB/s")
events = any(r.get("events_gbps") is not None for r in pool["rows"])
print(f"{'size':>10} {'p50 us':>9} {'pool GB/s':>10} {'raw GB/s':>9} {'MPI GB/s':>9} {'MPI fresh':>9} "
      f"{'pool/iperf3':>12} {'pool/raw':>9} {'pool/MPI':>9} {'pool/fresh':>10} {'MPI/iperf3':>11}"
      + (f" {'events/s':>10} {'events GB/s':>12} {'events/MPI':>11} {'CPU us/CDO: cons':>17} {'PM':>6} {'prov':>6}"
         if events else ""))
ratio = lambda a, b: f"{a / b:.2f}" if b else "-"
for r in pool["rows"]:
    mpi, raw = r.get("mpi_gbps") or 0.0, r.get("raw_gbps") or 0.0
    fresh = r.get("mpi_fresh_gbps") or 0.0
    line = (f"{r['size']:>10} {r['p50_us']:>9.1f} {r['gbps']:>10.3f} {raw:>9.3f} {mpi:>9.3f} {fresh:>9.3f} "
            f"{ratio(r['gbps'], ref):>12} {ratio(r['gbps'], raw):>9} {ratio(r['gbps'], mpi):>9} "
            f"{ratio(r['gbps'], fresh):>10} {ratio(mpi, ref):>11}")
    if events:
        rate, gbps = r.get("events_cdos_per_sec") or 0.0, r.get("events_gbps") or 0.0
        cpu = lambda k: f"{r[k]:.1f}" if r.get(k) is not None else "-"
        line += (f" {rate:>10.0f} {gbps:>12.3f} {ratio(gbps, mpi):>11} {cpu('events_consumer_cpu_us'):>17}"
                 f" {cpu('events_pm_cpu_us'):>6} {cpu('events_provider_cpu_us'):>6}")
    print(line)
if out:
    json.dump({"iperf3_gbps": ref, "pool": pool}, open(out, "w"), indent=1)
PY
