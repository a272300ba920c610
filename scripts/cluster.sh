#!/usr/bin/env bash
# cluster.sh -- an N-node Slurm cluster on one machine, for multi-node tests and for trying
# workflows across nodes: slurmctld on this host, one slurmd per node, each node a network
# namespace with its own hostname (UTS namespace), address and private /tmp, /dev/shm and
# cgroup mounts (mount namespace), so nothing crosses between nodes but the network.
#
#   cluster.sh start              configure, start munged, slurmctld and the nodes; wait until idle
#   cluster.sh stop               cancel jobs; kill every daemon and task by PID; remove the
#                                 namespaces, bridges and $CLUSTER_DIR
#   cluster.sh status             daemons, nodes (sinfo), namespaces
#   cluster.sh env                the exports srun/sinfo need
#   cluster.sh kill-node I        SIGKILL everything on node nI (its slurmd and tasks): a node crash
#   cluster.sh link I IFACE up|down   take node nI's interface (eth0, eth1, eth2) down or up
#   cluster.sh exec I CMD...      run CMD inside node nI (its network, hostname and mounts)
#   cluster.sh rsh nI COMMAND     run COMMAND through a shell inside node nI: mpirun's launch
#                                 agent (--mca plm_rsh_agent "cluster.sh rsh")
#
# Nodes are n1..nN (CLUSTER_NODES, default 3) at 198.18.7.I on bridge mstrbr1 (eth0 in each
# node); with CLUSTER_NETS=2 also at 198.18.8.I on bridge mstrbr2 (eth1), so that NIC choice
# and link events have two networks to choose between; with CLUSTER_NETS=3 also at
# 198.18.9.I on bridge mstrbr3 (eth2). CLUSTER_ETH1_NODES and CLUSTER_ETH2_NODES (node
# numbers and ranges, `1-5` or `1,5-8`; default all) say which nodes have eth1 and eth2:
# eth0 then serves as the management network (Slurm's control traffic) and two data
# networks can leave some nodes without a data network in common. 198.18.0.0/15 is the benchmarking
# range: it is never routed anywhere. The cluster's state lives in CLUSTER_DIR (default
# /var/lib/maestro-cluster). Each node has its own /tmp: directories under /tmp that jobs
# need (this checkout and CLUSTER_DIR by default; more with CLUSTER_SHARED, colon-separated)
# are bound back into every node. The switches of CLUSTER_TOPOLOGY (a topology.conf,
# copied beside slurm.conf) are Slurm's topology/tree when it is set. plugstack.conf loads
# the maestro SPANK plugin (as required: its errors fail the step) when CLUSTER_SPANK names it (a path to
# maestro_spank.so).
#
# Needs root (namespaces, mounts) and the packages of scripts/setup.sh; installs nothing.
# Recipe and gotchas: cgroup v1 hierarchies re-mounted inside each node (slurmd needs them),
# a per-node tmpfs for PMIxCliTmpDirBase, SlurmctldHost naming this host, %n in slurmd paths.
set -euo pipefail

D=${CLUSTER_DIR:-/var/lib/maestro-cluster}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$REPO:$D${CLUSTER_SHARED:+:$CLUSTER_SHARED}
N=${CLUSTER_NODES:-3}
NETS=${CLUSTER_NETS:-1}
TIMEOUT=${CLUSTER_TIMEOUT:-60}
NET1=198.18.7
NET2=198.18.8
NET3=198.18.9
ETH1_NODES=${CLUSTER_ETH1_NODES:-1-$N}
ETH2_NODES=${CLUSTER_ETH2_NODES:-1-$N}
CONF=$D/etc/slurm.conf
SOCK=$D/run/munge.socket
export SLURM_CONF=$CONF

log() { echo "[cluster] $*" >&2; }
die() { log "$*"; exit 1; }
# A command that fails outside a test says which, where (daemons log to files, not here).
set -E
trap 'log "line $LINENO: \"$BASH_COMMAND\" failed (exit $?)"' ERR

# start_failed NAME LOG: a daemon's start command failed before it detached; its reason is
# in its log file only.
start_failed() { die "$1 did not start; the end of $2:"$'\n'"$(tail -n 20 "$2" 2>/dev/null)"; }

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_pidfile() {
    local i
    for ((i = 0; i < 100; i++)); do alive "$1" && return 0; sleep 0.1; done
    die "no live pid in $1; see $D/log/"
}

check() {
    [[ $(id -u) -eq 0 ]] || die "needs root (network and mount namespaces); run as root"
    [[ $N =~ ^[0-9]+$ ]] && ((N >= 1 && N <= 32)) || die "CLUSTER_NODES=$N: use 1 to 32"
    [[ $NETS == 1 || $NETS == 2 || $NETS == 3 ]] || die "CLUSTER_NETS=$NETS: use 1, 2 or 3"
    local spec
    for spec in "$ETH1_NODES" "$ETH2_NODES"; do
        [[ $spec =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] ||
            die "node list '$spec' (CLUSTER_ETH1_NODES, CLUSTER_ETH2_NODES): use numbers and ranges, e.g. 1-5 or 1,5-8"
    done
    [[ $D == /* ]] || die "CLUSTER_DIR=$D: give an absolute path"
}

# in_nodes SPEC I: whether node I is in SPEC (`1-5`, `1,5-8`).
in_nodes() {
    local part
    for part in ${1//,/ }; do
        if [[ $part == *-* ]]; then
            (($2 >= ${part%-*} && $2 <= ${part#*-})) && return 0
        else
            (($2 == part)) && return 0
        fi
    done
    return 1
}

node_ok() { [[ $1 =~ ^[0-9]+$ ]] && ((${1} >= 1 && ${1} <= N)) || die "node $1: use 1 to $N"; }

write_config() {
    mkdir -p "$D"/{etc,log,run,munge,spool/ctld,pmixcli}
    chmod 0755 "$D" "$D/run"
    chmod 0700 "$D/munge"
    [[ -s $D/munge/munge.key ]] || dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
    chmod 0600 "$D/munge/munge.key"
    cat >"$CONF" <<C
# generated by cluster.sh: $N nodes in network namespaces
ClusterName=maestro
SlurmctldHost=$(hostname)($NET1.254)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=26817
SlurmdPort=26818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$D/spool/ctld
SlurmdSpoolDir=$D/spool/d%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
TaskPluginParam=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmdTimeout=10
MessageTimeout=5
SlurmdParameters=config_overrides
PlugStackConfig=$D/etc/plugstack.conf
NodeName=n[1-$N] NodeAddr=$NET1.[1-$N] CPUs=4 RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=n[1-$N] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
C
    echo "PMIxCliTmpDirBase=$D/pmixcli" >"$D/etc/mpi.conf"
    rm -f "$D/etc/topology.conf"
    if [[ -n ${CLUSTER_TOPOLOGY:-} ]]; then
        [[ -f $CLUSTER_TOPOLOGY ]] || die "CLUSTER_TOPOLOGY=$CLUSTER_TOPOLOGY: no such file"
        cp "$CLUSTER_TOPOLOGY" "$D/etc/topology.conf"
        echo "TopologyPlugin=topology/tree" >>"$CONF"
    fi
    if [[ -n ${CLUSTER_SPANK:-} ]]; then
        [[ -f $CLUSTER_SPANK ]] || die "CLUSTER_SPANK=$CLUSTER_SPANK: no such plugin"
        echo "required $CLUSTER_SPANK" >"$D/etc/plugstack.conf"
    else
        : >"$D/etc/plugstack.conf"
    fi
    cat >"$D/node_mounts" <<'M'
#!/bin/sh
# Runs inside a node's mount namespace before its slurmd: the host's cgroup v1 hierarchies,
# a private /tmp and /dev/shm with the directories jobs need bound back in ($2: paths,
# colon-separated; those under /tmp would be hidden otherwise), a private PMIx client dir.
set -e
mount -t tmpfs tmpfs /sys/fs/cgroup
for c in cpu cpuacct cpuset memory devices freezer blkio pids; do
    mkdir -p /sys/fs/cgroup/$c
    mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
done
mkdir -p /sys/fs/cgroup/systemd
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mount -t tmpfs tmpfs /dev/shm
hold=/dev/shm/.hold
i=0
for p in $(echo "$2" | tr ':' ' '); do
    i=$((i + 1))
    case $p in /tmp/*) mkdir -p $hold/$i && mount --rbind "$p" $hold/$i ;; esac
done
mount -t tmpfs tmpfs /tmp
i=0
for p in $(echo "$2" | tr ':' ' '); do
    i=$((i + 1))
    case $p in /tmp/*) mkdir -p "$p" && mount --rbind $hold/$i "$p" && umount -l $hold/$i ;; esac
done
rm -rf $hold
mount -t tmpfs tmpfs "$1/pmixcli"
M
    chmod +x "$D/node_mounts"
}

# link HOSTSIDE NS IFACE BRIDGE ADDR: a veth from the bridge into the node.
veth() {
    # A node namespace is torn down asynchronously by the kernel (sockets in TIME_WAIT keep
    # it a while): remove a host side left from the last cluster first.
    ip link del "$1" 2>/dev/null || true
    ip link add "$1" type veth peer name "$3" netns "$2"
    ip link set "$1" master "$4"
    ip link set "$1" up
    ip -n "$2" addr add "$5/24" dev "$3"
    ip -n "$2" link set "$3" up
}

bridge() {
    ip link show "$1" >/dev/null 2>&1 || ip link add "$1" type bridge
    ip addr replace "$2.254/24" dev "$1"
    ip link set "$1" up
}

nodes_ready() {
    local st
    st=$(sinfo -h -N -o "%N %T" 2>/dev/null) || return 1
    [[ $(grep -cE " (idle|mixed|allocated)$" <<<"$st") -eq $N ]]
}

start() {
    check
    local t0=$SECONDS i ns
    alive "$D/run/slurmctld.pid" && die "a cluster runs already in $D (cluster.sh stop first)"
    write_config
    bridge mstrbr1 $NET1
    ((NETS >= 2)) && bridge mstrbr2 $NET2
    ((NETS == 3)) && bridge mstrbr3 $NET3
    for ((i = 1; i <= N; i++)); do
        ns=mstr-n$i
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        veth "mstr${i}a" "$ns" eth0 mstrbr1 "$NET1.$i"
        if ((NETS >= 2)) && in_nodes "$ETH1_NODES" "$i"; then
            veth "mstr${i}b" "$ns" eth1 mstrbr2 "$NET2.$i"
        fi
        if ((NETS == 3)) && in_nodes "$ETH2_NODES" "$i"; then
            veth "mstr${i}c" "$ns" eth2 mstrbr3 "$NET3.$i"
        fi
    done
    munged -S "$SOCK" --key-file="$D/munge/munge.key" --pid-file="$D/run/munged.pid" \
        --log-file="$D/log/munged.log" --seed-file="$D/munge/seed" ||
        start_failed munged "$D/log/munged.log"
    wait_pidfile "$D/run/munged.pid"
    slurmctld -c -f "$CONF" || start_failed slurmctld "$D/log/slurmctld.log"
    wait_pidfile "$D/run/slurmctld.pid"
    for ((i = 1; i <= N; i++)); do
        ip netns exec "mstr-n$i" unshare --uts sh -c \
            "hostname n$i && $D/node_mounts $D $SHARED && exec slurmd -f $CONF -N n$i" ||
            start_failed "slurmd of n$i" "$D/log/slurmd.n$i.log"
        wait_pidfile "$D/run/slurmd.n$i.pid"
    done
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        nodes_ready && break
        scontrol update NodeName="n[1-$N]" State=RESUME >/dev/null 2>&1 || true
        sleep 0.2
    done
    nodes_ready || { sinfo -N >&2 || true; die "nodes not idle after ${TIMEOUT}s; see $D/log/"; }
    log "ready: $N nodes, $NETS network(s), in $((SECONDS - t0))s"
    print_env
}

print_env() {
    cat <<E
export SLURM_CONF=$CONF
# srun -N $N -n $N --mpi=pmix hostname     (nodes n1..n$N at $NET1.1-$N$( ((NETS >= 2)) && echo "; eth1 at $NET2.I on nodes $ETH1_NODES")$( ((NETS == 3)) && echo "; eth2 at $NET3.I on nodes $ETH2_NODES"))
# logs: $D/log/   stop: $0 stop
E
}

# gone_within TENTHS PID...: whether every PID is gone within TENTHS tenths of a second.
gone_within() {
    local i p any t=$1
    shift
    for ((i = 0; i < t; i++)); do
        any=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && any=1; done
        ((any)) || return 0
        sleep 0.1
    done
    return 1
}

# kill_all PID...: SIGTERM, a grace period, then SIGKILL, and waits until they are gone
# (the next cluster's daemons would find their ports, locks and files still held).
kill_all() {
    (($#)) || return 0
    kill "$@" 2>/dev/null || true
    gone_within 50 "$@" && return 0
    log "still running 5 s after SIGTERM, killed: $(ps -o pid=,comm= -p "$(IFS=,; echo "$*")" 2>/dev/null | xargs || true)"
    kill -9 "$@" 2>/dev/null || true
    gone_within 50 "$@" || log "still there 5 s after SIGKILL: $*"
}

stop() {
    [[ $(id -u) -eq 0 ]] || die "needs root"
    local pids=() f ns i
    if alive "$D/run/slurmctld.pid"; then
        scancel --quiet 2>/dev/null || true
        for ((i = 0; i < 25; i++)); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.2; done
    fi
    for f in "$D"/run/slurmd.*.pid "$D/run/slurmctld.pid" "$D/run/munged.pid"; do
        alive "$f" && pids+=("$(cat "$f")")
    done
    kill_all "${pids[@]}"
    for ns in $(ip netns list 2>/dev/null | awk '/^mstr-n[0-9]+/ {print $1}'); do
        # Tasks left behind on the node, then the node.
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null)
        kill_all "${pids[@]}"
        ip netns del "$ns"
    done
    for f in mstrbr1 mstrbr2 mstrbr3; do ip link del "$f" 2>/dev/null || true; done
    # Host sides of the nodes' links (deleting one removes its peer too).
    for f in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(mstr[0-9]*[abc]\)@.*/\1/p'); do
        ip link del "$f" 2>/dev/null || true
    done
    rm -rf "$D"
    log "stopped"
}

status() {
    local f
    for f in "$D/run/munged.pid" "$D/run/slurmctld.pid" "$D"/run/slurmd.*.pid; do
        [[ -e $f ]] || continue
        if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; else echo "$(basename "$f" .pid): dead"; fi
    done
    ip netns list 2>/dev/null | grep '^mstr-n' || echo "no node namespaces"
    alive "$D/run/slurmctld.pid" && sinfo -N || true
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    env) print_env ;;
    kill-node)
        node_ok "${2:-}"
        mapfile -t pids < <(ip netns pids "mstr-n$2")
        ((${#pids[@]})) && kill -9 "${pids[@]}"
        log "node n$2 killed (${#pids[@]} processes)"
        ;;
    link)
        node_ok "${2:-}"
        [[ ${3:-} =~ ^eth[012]$ && ${4:-} =~ ^(up|down)$ ]] || die "usage: $0 link I eth0|eth1|eth2 up|down"
        ip -n "mstr-n$2" link set "$3" "$4"
        ;;
    exec)
        node_ok "${2:-}"
        i=$2
        shift 2
        pid=$(cat "$D/run/slurmd.n$i.pid")
        # In the node's namespaces, from the caller's directory (nsenter -m would start
        # in the node's root, and relative paths would fail).
        exec nsenter -t "$pid" -n -m -u --wd="$PWD" "$@"
        ;;
    rsh)
        # mpirun's launch agent (`--mca plm_rsh_agent "cluster.sh rsh"`): runs COMMAND
        # (one string or words, as ssh takes it) through a shell inside node nI.
        [[ ${2:-} =~ ^n([0-9]+)$ ]] || die "rsh: host '${2:-}': use n1 to n$N"
        i=${BASH_REMATCH[1]}
        node_ok "$i"
        shift 2
        (($#)) || die "rsh: no command for n$i"
        pid=$(cat "$D/run/slurmd.n$i.pid")
        exec nsenter -t "$pid" -n -m -u --wd="$PWD" sh -c "$*"
        ;;
    *) echo "usage: $0 {start|stop|status|env|kill-node I|link I IFACE up|down|exec I CMD...|rsh nI COMMAND}" >&2; exit 2 ;;
esac
