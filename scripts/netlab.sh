#!/bin/sh
# netlab: K hosts in network namespaces on one switch, every link shaped to
# a bandwidth, and a command run by mpirun with one rank per host.
#
#   sh scripts/netlab.sh [-k K] [-rate RATE] [-mtu MTU] -- COMMAND [ARGS...]
#   sh scripts/netlab.sh [-k K] [-rate RATE] [-mtu MTU] -check
#
#   -k K        hosts (2..64, default 2)
#   -rate RATE  each link's rate in each direction, tc's units: 1gbit,
#               100mbit, 500mbit, ... (default 1gbit)
#   -mtu MTU    the links' MTU (default 1500)
#   -check      measure instead: every host sends to its right neighbour and
#               receives from its left one at once (TCP, python3), and the
#               rates must lie within 85..102% of RATE; exit 1 otherwise
#
# What it makes (root; nothing in the caller's own namespace changes):
#   namespaces  sdnn-lab-PID-0 .. sdnn-lab-PID-(K-1) (the hosts) and
#               sdnn-lab-PID-sw (the switch: a bridge br0)
#   links       a veth pair per host: eth0 in the host, hI on the switch
#   addresses   10.77.X.(I+1)/24 on the hosts' eth0, X = PID mod 250 + 1
#   shaping     tc tbf (rate RATE, burst ~2 ms of RATE, latency 50 ms) on the
#               egress of both ends of every link, so host->switch and
#               switch->host each carry RATE (the kernel has no netem:
#               no delay is added)
#   a temporary directory with the rsh agent mpirun uses to start its
#   daemons in the namespaces (ip netns exec HOST sh -c ...)
# All of it is removed on exit, also after a failure, Ctrl-C or TERM, with
# what still runs in the namespaces and OpenMPI's session directories
# (/tmp/ompi.sdnn-lab-PID-*).
#
# The K hosts share this machine's cores: --bind-to none, because each
# host's daemon would otherwise bind its one rank to "its" first core, the
# same core for every host (all ranks on one core).
#
# COMMAND runs as
#   ip netns exec sdnn-lab-PID-0 mpirun -np K --host <the K namespaces>
#       --bind-to none --mca plm_rsh_agent AGENT --mca btl self,tcp --mca pml ob1
#       --mca btl_tcp_if_include / oob_tcp_if_include 10.77.X.0/24
#       -x SDNN_... (every SDNN_* variable set) COMMAND
# with SDNN_LAB_NET=10.77.X (host I is 10.77.X.(I+1) on eth0)
# in the current directory, each host in its own UTS namespace too (host
# name = namespace name), stdin closed, e.g.
#   sh scripts/netlab.sh -k 4 -rate 100mbit -- ./darknet scalednn bench-comm -d mpi -g 1 -b 4M -e 64M -c 0
# The exit status is COMMAND's (mpirun's).
set -u

K=2
RATE=1gbit
MTU=1500
CHECK=0
usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    -k) [ $# -ge 2 ] || usage; K=$2; shift 2 ;;
    -rate) [ $# -ge 2 ] || usage; RATE=$2; shift 2 ;;
    -mtu) [ $# -ge 2 ] || usage; MTU=$2; shift 2 ;;
    -check) CHECK=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "netlab: unknown argument '$1'" >&2; usage ;;
    esac
done
case "$K" in ''|*[!0-9]*) echo "netlab: -k $K: not a number" >&2; exit 2 ;; esac
if [ "$K" -lt 2 ] || [ "$K" -gt 64 ]; then echo "netlab: -k $K: use 2..64" >&2; exit 2; fi
case "$MTU" in ''|*[!0-9]*) echo "netlab: -mtu $MTU: not a number" >&2; exit 2 ;; esac
# RATE in bit/s, for the burst and the check
RATE_BPS=$(echo "$RATE" | awk '
    match($0, /^[0-9]+(\.[0-9]+)?/) {
        v = substr($0, 1, RLENGTH); u = tolower(substr($0, RLENGTH + 1))
        m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : -1
        if (m > 0 && v > 0) { printf "%.0f\n", v * m; exit }
    }')
if [ -z "$RATE_BPS" ]; then
    echo "netlab: -rate $RATE: use a number with bit, kbit, mbit or gbit (1gbit, 100mbit)" >&2
    exit 2
fi
if [ "$CHECK" -eq 0 ] && [ $# -eq 0 ]; then
    echo "netlab: no command (sh scripts/netlab.sh [-k K] [-rate RATE] -- COMMAND, or -check)" >&2
    exit 2
fi
if [ "$(id -u)" -ne 0 ]; then echo "netlab: needs root (ip netns, tc)" >&2; exit 2; fi
for tool in ip tc awk; do
    command -v $tool >/dev/null 2>&1 || { echo "netlab: $tool not found (apt-get install iproute2)" >&2; exit 2; }
done
if [ "$CHECK" -eq 1 ]; then
    command -v python3 >/dev/null 2>&1 || { echo "netlab: -check needs python3" >&2; exit 2; }
else
    command -v mpirun >/dev/null 2>&1 || { echo "netlab: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }
fi

TAG="sdnn-lab-$$"
NET="10.77.$(( $$ % 250 + 1 ))"
SW="$TAG-sw"
TMP=""
MADE=""          # namespaces made so far, removed on exit

CHILD=""        # mpirun, while it runs
cleanup() {
    trap - EXIT INT TERM
    [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
    for ns in $MADE; do
        # what still runs in our namespaces (daemons, ranks) was started here
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
    done
    sleep 0.2 2>/dev/null || sleep 1
    for ns in $MADE; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    [ -n "$TMP" ] && rm -rf "$TMP"
    # OpenMPI's session directories, named after our hosts (left behind
    # when its daemons are killed)
    rm -rf "${TMPDIR:-/tmp}/ompi.$TAG-"*
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "netlab: $*" >&2; exit 1; }

# burst: 2 ms at RATE, at least 32 KiB (whole GSO packets pass)
BURST=$(( RATE_BPS / 8 / 500 ))
[ "$BURST" -lt 32768 ] && BURST=32768

ip netns add "$SW" || fail "cannot create namespace $SW"
MADE="$SW"
ip -n "$SW" link add br0 type bridge || fail "cannot create the bridge"
ip -n "$SW" link set br0 up
i=0
HOSTS=""
while [ "$i" -lt "$K" ]; do
    ns="$TAG-$i"
    ip netns add "$ns" || fail "cannot create namespace $ns"
    MADE="$MADE $ns"
    ip -n "$SW" link add "h$i" mtu "$MTU" type veth peer name eth0 mtu "$MTU" netns "$ns" ||
        fail "cannot create the link of $ns"
    ip -n "$SW" link set "h$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$NET.$(( i + 1 ))/24" dev eth0
    ip -n "$ns" link set eth0 up
    tc -n "$ns" qdisc add dev eth0 root tbf rate "$RATE" burst "$BURST" latency ${LATENCY:-50ms} ||
        fail "tc tbf on $ns eth0 failed"
    tc -n "$SW" qdisc add dev "h$i" root tbf rate "$RATE" burst "$BURST" latency ${LATENCY:-50ms} ||
        fail "tc tbf on the switch's h$i failed"
    HOSTS="${HOSTS:+$HOSTS,}$ns"
    i=$(( i + 1 ))
done
# wait until every link is up and every switch port forwards
tries=0
while :; do
    down=0
    i=0
    while [ "$i" -lt "$K" ]; do
        ip -n "$TAG-$i" -o link show eth0 | grep -q "state UP" || down=1
        ip -n "$SW" -d -o link show "h$i" | grep -q "state forwarding" || down=1
        i=$(( i + 1 ))
    done
    [ "$down" -eq 0 ] && break
    tries=$(( tries + 1 ))
    [ "$tries" -gt 100 ] && fail "the links did not come up within 10 s"
    sleep 0.1
done
TMP=$(mktemp -d /tmp/sdnn-lab-XXXXXX) || fail "mktemp failed"
echo "netlab: $K hosts $TAG-0..$(( K - 1 )) at $NET.1..$K/24, links $RATE (burst $BURST B), MTU $MTU" >&2

if [ "$CHECK" -eq 1 ]; then
    # Every host sends to its right neighbour for SECS seconds while
    # receiving from its left one; each receiver reports its rate.
    cat >"$TMP/flow.py" <<'EOF'
import socket, sys, time
role, addr, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
if role == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); s.settimeout(30)
    c, _ = s.accept(); c.settimeout(30)
    total, first, last = 0, None, None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        now = time.monotonic()
        if first is None: first = now
        else: total += len(b)     # bytes after the first read, over first..last
        last = now
    print("%.0f" % (8 * total / (last - first) if last and last > first else 0))
else:
    c = None
    for _ in range(100):
        try:
            c = socket.create_connection((addr, port), timeout=30); break
        except OSError:
            time.sleep(0.05)
    if c is None: sys.exit("cannot connect to %s:%d" % (addr, port))
    buf = b"\0" * (1 << 20); end = time.monotonic() + secs
    while time.monotonic() < end: c.sendall(buf)
    c.close()
EOF
    SECS=3
    i=0
    while [ "$i" -lt "$K" ]; do
        ip netns exec "$TAG-$i" python3 "$TMP/flow.py" recv "$NET.$(( i + 1 ))" 5201 30 >"$TMP/rate.$i" 2>&1 &
        i=$(( i + 1 ))
    done
    i=0
    while [ "$i" -lt "$K" ]; do
        right=$(( (i + 1) % K ))
        ip netns exec "$TAG-$i" python3 "$TMP/flow.py" send "$NET.$(( right + 1 ))" 5201 "$SECS" \
            >"$TMP/send.$i" 2>&1 &
        i=$(( i + 1 ))
    done
    wait
    bad=0
    i=0
    while [ "$i" -lt "$K" ]; do
        left=$(( (i - 1 + K) % K ))
        got=$(cat "$TMP/rate.$i")
        verdict=$(awk -v g="$got" -v r="$RATE_BPS" 'BEGIN {
            if (g + 0 <= 0) { print "FAILED (no data)"; exit }
            p = 100 * g / r; printf "%.1f%% of %s %s", p, r / 1e6 " Mbit/s", (p >= 85 && p <= 102) ? "ok" : "FAILED" }')
        printf 'netlab: host %d -> host %d: %.1f Mbit/s TCP payload, %s\n' "$left" "$i" \
            "$(awk -v g="$got" 'BEGIN { print g / 1e6 }')" "$verdict"
        case "$verdict" in *FAILED*) bad=1 ;; esac
        i=$(( i + 1 ))
    done
    [ "$bad" -eq 0 ] && echo "netlab: check passed (TCP payload over MTU $MTU is at most $(awk -v m="$MTU" 'BEGIN { printf "%.1f", 100 * (m - 52) / (m + 14) }')% of the link rate)"
    exit "$bad"
fi

# Each host also gets a UTS namespace with its own name as host name, so
# mpirun (on host 0) and its daemons see K distinct nodes.
cat >"$TMP/agent" <<'EOF'
#!/bin/sh
# rsh agent for mpirun: "agent HOST COMMAND..." runs COMMAND in namespace HOST
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
EOF
chmod +x "$TMP/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# SDNN_* settings reach every rank (OMPI_* ones mpirun forwards itself)
export SDNN_LAB_NET="$NET"
XENV=""
for v in $(env | sed -n 's/^\(SDNN_[A-Za-z0-9_]*\)=.*/\1/p'); do XENV="$XENV -x $v"; done
ip netns exec "$TAG-0" unshare --uts sh -c 'hostname "$0" && shift && exec "$@"' "$TAG-0" - \
    mpirun --allow-run-as-root --oversubscribe --stdin none -np "$K" --host "$HOSTS" \
    --bind-to none \
    --mca plm_rsh_agent "$TMP/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca orte_startup_timeout 30 $XENV \
    --mca btl self,tcp --mca pml ob1 \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    "$@" &
CHILD=$!
# wait (unlike a foreground command) returns at once when a signal comes
wait "$CHILD"
rc=$?
CHILD=""
exit "$rc"
