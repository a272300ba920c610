#!/usr/bin/env bash
# bench-shards.sh -- a sharded pool's control-plane throughput with its load coming from
# other nodes: a cluster of scripts/cluster.sh (network namespaces joined by a bridge:
# veth, TCP), the pool managers on this host (threads of `maestro bench pm --shards K`,
# listening on the bridge), the injector processes spread over the nodes in turn
# (`--launcher "cluster.sh exec I"`), for each K asked.
#
#   scripts/bench-shards.sh [--shards LIST] [--nodes N] [--injectors N] [--cdos N] [--json FILE]
#
# Prints per K the aggregate declare+seal+offer/s, per shard its CDOs, its manager's CPU
# per operation and the pool's memory per live CDO. Defaults: --shards 1,2,4, 4 nodes,
# 8 injectors of 250000 CDOs each. Needs root (namespaces) and the packages of
# scripts/setup.sh (run it first); builds the release binaries. The cluster it starts is
# stopped on exit.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARDS=1,2,4
NODES=4
INJECTORS=8
CDOS=250000
JSON=
while (($#)); do
    case $1 in
        --shards) SHARDS=${2:?--shards needs a list}; shift 2 ;;
        --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
        --injectors) INJECTORS=${2:?--injectors needs a number}; shift 2 ;;
        --cdos) CDOS=${2:?--cdos needs a number}; shift 2 ;;
        --json) JSON=${2:?--json needs a file}; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "bench-shards: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "bench-shards: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (network and mount namespaces); run as root"
[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "--nodes $NODES: give a number of nodes"

cd "$REPO"
cargo build --release -p maestro -p maestro-bench >&2
MAESTRO=$REPO/target/release/maestro

export CLUSTER_NODES=$NODES CLUSTER_DIR
CLUSTER_DIR=$(mktemp -d /var/tmp/maestro-bench-shards.XXXXXX)
CLUSTER="$REPO/scripts/cluster.sh"
cleanup() {
    "$CLUSTER" stop >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$CLUSTER" start >/dev/null

LAUNCHERS=()
for ((i = 1; i <= NODES; i++)); do LAUNCHERS+=(--launcher "$CLUSTER exec $i"); done
RESULTS=$CLUSTER_DIR/results.jsonl
: >"$RESULTS"
IFS=, read -ra KS <<<"$SHARDS"
for k in "${KS[@]}"; do
    # This host's address on the cluster's bridge (cluster.sh gives it .254).
    "$MAESTRO" bench pm --shards "$k" --injectors "$INJECTORS" --cdos "$CDOS" \
        --listen 198.18.7.254:0 "${LAUNCHERS[@]}" --json >>"$RESULTS"
done

python3 - "$RESULTS" "$NODES" "$JSON" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
nodes, out = sys.argv[2], sys.argv[3]
print(f"injectors on {nodes} nodes, managers on this host, TCP over veth")
print(f"{'K':>3} {'CDOs':>10} {'ops/s':>10} {'B/CDO':>7}  per shard: CDOs, CPU us/op")
for r in rows:
    per = "  ".join(f"{s['cdos']}:{s['cpu_us_per_op']:.2f}" for s in r["shards"])
    print(f"{len(r['shards']):>3} {r['cdos']:>10} {r['offers_per_sec']:>10.0f} "
          f"{r['pm_bytes_per_cdo']:>7.0f}  {per}")
if out:
    json.dump(rows, open(out, "w"), indent=1)
PY
