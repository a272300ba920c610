#!/usr/bin/env bash
# bench-redis.sh -- the pool manager's control-plane throughput against Redis doing the same
# kind of work, in alternating pairs: `redis-benchmark -t set -P 1000 -r 1000000000` (a new
# key per SET, pipelined 1000 deep, as each offer stores a new CDO) against `maestro bench
# pm` (2 injectors pipelining declare+seal+offer in batches of 1000), both over a Unix
# socket of this host, as many keys as CDOs.
#
#   scripts/bench-redis.sh [--pairs N] [--cdos N] [--json FILE]
#
# Prints every run (Redis SETs/s; the PM's declare+seal+offer/s, its CPU per operation and
# memory per live CDO), then the medians and their ratio. Defaults: 3 pairs, 200000 CDOs per
# injector (400000 keys). Needs redis-server and redis-benchmark (Debian: redis-server,
# redis-tools; installed as root, else the command is printed); builds the release
# binaries. The Redis server it starts (no persistence, a private directory) is stopped
# on exit.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PAIRS=3
CDOS=200000
JSON=
while (($#)); do
    case $1 in
        --pairs) PAIRS=${2:?--pairs needs a number}; shift 2 ;;
        --cdos) CDOS=${2:?--cdos needs a number}; shift 2 ;;
        --json) JSON=${2:?--json needs a file}; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "bench-redis: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "bench-redis: $*" >&2; exit 1; }
[[ $PAIRS =~ ^[1-9][0-9]*$ ]] || die "--pairs $PAIRS: give a number of pairs (1 or more)"
[[ $CDOS =~ ^[1-9][0-9]*$ ]] || die "--cdos $CDOS: give a number of CDOs per injector (1 or more)"

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    if [[ $(id -u) -ne 0 ]]; then
        die "needs Redis; run as root: apt-get update && apt-get install -y redis-server redis-tools"
    fi
    echo "bench-redis: installing redis-server redis-tools" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq redis-server redis-tools >/dev/null
fi

cd "$REPO"
cargo build --release -p maestro -p maestro-bench >&2
MAESTRO=$REPO/target/release/maestro

DIR=$(mktemp -d /tmp/maestro-bench-redis.XXXXXX)
SOCK=$DIR/redis.sock
REDIS_PID=
cleanup() {
    if [[ -n $REDIS_PID ]]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# No TCP port, no snapshots, no append-only file: a store in memory, as the PM's table is.
redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save "" \
    --appendonly no --dir "$DIR" --logfile "$DIR/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do
    [[ -S $SOCK ]] && redis-cli -s "$SOCK" ping >/dev/null 2>&1 && break
    kill -0 "$REDIS_PID" 2>/dev/null || die "redis-server ended at start (see its log: $DIR/redis.log)"
    sleep 0.1
done
redis-cli -s "$SOCK" ping >/dev/null 2>&1 || die "redis-server did not answer within 10 s"

KEYS=$((2 * CDOS))
RESULTS=$DIR/results.jsonl
: >"$RESULTS"
redis_run() {
    redis-cli -s "$SOCK" flushall >/dev/null
    local out
    out=$(redis-benchmark -s "$SOCK" -t set -P 1000 -r 1000000000 -n "$KEYS" --csv)
    # --csv: a header, then "SET","<requests per second>",...
    local rps
    rps=$(awk -F'"' '$2 == "SET" {print $4}' <<<"$out")
    [[ -n $rps ]] || die "redis-benchmark printed no SET rate: $out"
    local keys
    keys=$(redis-cli -s "$SOCK" dbsize)
    echo "{\"who\": \"redis\", \"per_sec\": $rps, \"keys\": $keys}" >>"$RESULTS"
}
pm_run() {
    "$MAESTRO" bench pm --injectors 2 --cdos "$CDOS" --json |
        python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
s = r["shards"][0]
print(json.dumps({"who": "pm", "per_sec": r["offers_per_sec"], "cpu_us_per_op": s["cpu_us_per_op"], "bytes_per_cdo": r["pm_bytes_per_cdo"]}))' >>"$RESULTS"
}
for ((i = 1; i <= PAIRS; i++)); do
    # Which goes first alternates: neither side always runs on a machine the other warmed.
    if ((i % 2)); then redis_run; pm_run; else pm_run; redis_run; fi
done

python3 - "$RESULTS" "$JSON" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = sys.argv[2]
redis = [r for r in rows if r["who"] == "redis"]
pm = [r for r in rows if r["who"] == "pm"]
for r in rows:
    if r["who"] == "redis":
        print(f"redis  {r['per_sec']:>10.0f} SET/s ({r['keys']} keys)")
    else:
        print(f"pm     {r['per_sec']:>10.0f} declare+seal+offer/s, "
              f"{r['cpu_us_per_op']:.2f} us CPU each, {r['bytes_per_cdo']:.0f} B per live CDO")
mr = statistics.median(r["per_sec"] for r in redis)
mp = statistics.median(r["per_sec"] for r in pm)
print(f"medians: redis {mr:.0f}/s, pm {mp:.0f}/s, pm/redis {mp / mr:.2f}x")
if out:
    json.dump({"runs": rows, "redis_median": mr, "pm_median": mp, "ratio": mp / mr},
              open(out, "w"), indent=1)
PY
