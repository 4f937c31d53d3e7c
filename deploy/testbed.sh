#!/bin/sh
# testbed.sh - N hosts as network namespaces on one bridge, each host's link
# with its own rate (tbf) and delay (netem, or strata-delayer where the
# kernel has no netem), running a Strata coordinator (host 0) and workers
# (hosts 1..N-1): a rehearsal of a multi-host deployment on one machine
# (docs/testbed.md). Needs root (ip netns, tc).
#
#   deploy/testbed.sh up N [--link RATE:DELAY]... [--model PATH] [--build DIR]
#                          [--wire DTYPE|auto] [--threads T]
#                          [--delay-by auto|netem|delayer] [-- COORDINATOR FLAGS...]
#   deploy/testbed.sh exec I CMD...    run CMD in host I (0: the coordinator's)
#   deploy/testbed.sh delay I PORT TO_PORT
#                                      a delayer in host I on its PORT in front
#                                      of its TO_PORT (another service's links)
#   deploy/testbed.sh status           the coordinator's `strata status`
#   deploy/testbed.sh down             stop everything, delete the namespaces
#
# --link is given once per host 1..N-1 in order (the last one repeats for
# the rest; none: unlimited). RATE is tc's (1gbit, 100mbit, 0 = unlimited),
# DELAY a time (1ms, 0.1ms, 100us, 0 = none) added one way on the host's
# egress. --delay-by netem adds it with tc netem (sch_netem), refused with
# a message on a kernel without it; delayer with strata-delayer (built in
# DIR/deploy) in front of every data-plane listener: the workers' and the
# coordinator's results address, each connection's bytes held the sender
# host's delay (docs/testbed.md); auto (the default) netem where the
# kernel has it, else the delayer, and says which. State (pids,
# addresses, logs) lives in $STRATA_TESTBED (default /tmp/strata-testbed).
set -eu

NAME=testbed
DIR=${STRATA_TESTBED:-/tmp/strata-testbed}
TAG=stb             # namespace names: stb-br, stb-h0, stb-h1, ...
NET=10.233.0        # host I is $NET.(I+1)/24
TBF_BURST=64kb      # tbf bucket: a few packets at line rate
TBF_LATENCY=3s      # tbf queue: holds a 1 MiB link probe on slow rates
DOWN_WAIT_TENTHS=100 # down: 10 s for the processes to end before SIGKILL
# delayer mode: fixed ports, each in its own namespace's port space
RESULTS_PORT=7002   # host 0: the coordinator's results listener (loopback)
DATA_PORT=7001      # host I: the worker's data-plane listener
FRONT_PORT=7000     # host I: the delayer in front of DATA_PORT, advertised;
                    # host 0: the delayer in front of RESULTS_PORT listens on
                    # RESULTS_PORT of the host's address
CONTROL_PORT=7011   # host I: the worker's control listener (other workers' probes)
CONTROL_FRONT=7010  # host I: the delayer in front of CONTROL_PORT, advertised

die() { echo "$NAME: $*" >&2; exit 1; }
ns() { echo "$TAG-h$1"; }

shape() { # shape NS DEV RATE DELAY (DELAY by netem; a zero or empty one: rate only)
    r=$3; d=$4
    if ! no_delay "$d"; then
        tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$d" 2>/dev/null ||
            die "netem is not available in this kernel (tc qdisc netem failed): use --delay-by delayer, DELAY 0 or a kernel with sch_netem"
        [ "$r" = "0" ] || tc -n "$1" qdisc add dev "$2" parent 1: handle 2: tbf rate "$r" \
            burst $TBF_BURST latency $TBF_LATENCY || die "tbf rate $r on $1 failed"
    elif [ "$r" != "0" ]; then
        tc -n "$1" qdisc add dev "$2" root tbf rate "$r" burst $TBF_BURST latency $TBF_LATENCY ||
            die "tbf rate $r on $1 failed (sch_tbf missing?)"
    fi
}

has_netem() { # has_netem NS DEV: whether tc can add netem there (removed again)
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay 1ms 2>/dev/null || return 1
    tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
}

to_ms() { # to_ms DELAY: tc's time (5ms, 0.1ms, 100us, 1s, 0) in milliseconds
    case $1 in
    0) echo 0;;
    *ms) echo "${1%ms}";;
    *us) awk -v v="${1%us}" 'BEGIN { printf "%.4f\n", v / 1000 }';;
    *s) awk -v v="${1%s}" 'BEGIN { printf "%.4f\n", v * 1000 }';;
    *) die "delay '$1' is not a time (1ms, 0.1ms, 100us, 1s)";;
    esac
}
no_delay() { # no_delay DELAY: true for an empty or zero delay (0, 0ms, 0.0us)
    [ -z "$1" ] || awk -v v="$(to_ms "$1")" 'BEGIN { exit !(v + 0 == 0) }'
}

# start_delayer I PORT TO_PORT - strata-delayer in host I on its address's
# PORT, forwarding to TO_PORT (of TO_HOST, default the same address), each
# direction held its sender host's delay ($DIR/delays: "I MS" per line)
start_delayer() {
    sd_host=$NET.$(($1 + 1))
    sd_self=$(awk -v i="$1" '$1 == i { print $2 }' "$DIR/delays")
    sd_peers=$(awk -v net="$NET" '{ printf " --peer-delay %s.%d=%s", net, $1 + 1, $2 }' "$DIR/delays")
    # shellcheck disable=SC2086 # sd_peers: one flag and value per host
    ip netns exec "$(ns "$1")" "$DELAYER" --listen "$sd_host:$2" --to "${TO_HOST:-$sd_host}:$3" \
        --delay-ms "${sd_self:-0}" $sd_peers > "$DIR/delayer$1-$2" 2> "$DIR/delayer$1-$2.err" &
    echo $! >> "$DIR/pids"
    wait_word "$DIR/delayer$1-$2" "delaying on" >/dev/null
}

wait_word() { # wait_word FILE PREFIX: the word after "PREFIX " in FILE (30 s)
    # sh has no local variables: the counter must not be up()'s host index i
    ww_try=0
    while [ $ww_try -lt 300 ]; do
        a=$(sed -n "s|^$2 \([^ ]*\).*|\1|p" "$1" 2>/dev/null | head -n 1)
        if [ -n "$a" ]; then echo "$a"; return 0; fi
        ww_try=$((ww_try + 1)); sleep 0.1
    done
    die "no '$2' line in $1: $(tail -n 5 "$1.err" 2>/dev/null)"
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root (ip netns, tc)"
    [ ! -e "$DIR/hosts" ] || die "already up ($DIR/hosts); run '$0 down' first"
    n=$1; shift
    case $n in '' | *[!0-9]*) die "up N: N is a number of hosts (>= 2)";; esac
    [ "$n" -ge 2 ] && [ "$n" -le 250 ] || die "up N: N must be in 2..250"
    links=""; model=""; build=build; wire=auto; threads=1; delay_by=auto
    while [ $# -gt 0 ]; do
        case $1 in
        --link) links="$links $2"; shift 2;;
        --model) model=$2; shift 2;;
        --build) build=$2; shift 2;;
        --wire) wire=$2; shift 2;;
        --threads) threads=$2; shift 2;;
        --delay-by) delay_by=$2; shift 2;;
        --) shift; break;;
        *) die "unknown argument '$1'";;
        esac
    done
    [ -n "$model" ] || die "--model PATH is required"
    case $delay_by in auto | netem | delayer) ;; *) die "--delay-by: auto, netem or delayer";; esac
    any_delay=0
    for l in $links; do
        case $l in *:*) no_delay "${l#*:}" || any_delay=1;; esac
    done
    DELAYER=$build/deploy/strata-delayer
    mkdir -p "$DIR"
    # a failure from here on takes down what was made (namespaces, processes)
    trap 'down >&2' EXIT
    ip netns add $TAG-br
    echo "$n" > "$DIR/hosts"
    ip -n $TAG-br link add br0 type bridge
    ip -n $TAG-br link set br0 up
    last="0:0"
    echo "0 0" > "$DIR/delays" # host 0's egress: no delay
    i=0
    while [ $i -lt "$n" ]; do
        h=$(ns $i)
        ip netns add "$h"
        ip link add "v$h" netns "$h" type veth peer name "p$i" netns $TAG-br
        ip -n "$h" link set "v$h" name eth0
        ip -n "$h" addr add "$NET.$((i + 1))/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$h" link set lo up
        ip -n $TAG-br link set "p$i" master br0
        ip -n $TAG-br link set "p$i" up
        if [ $i -gt 0 ]; then
            l=$(echo $links | cut -d' ' -f$i)
            [ -n "$l" ] || l=$last
            last=$l
            rate=${l%%:*}; delay=${l#*:}
            [ "$delay" != "$l" ] || delay=0
            if [ $i = 1 ] && [ $any_delay = 1 ] && [ "$delay_by" = auto ]; then
                if has_netem "$h" eth0; then delay_by=netem; else
                    delay_by=delayer
                    echo "$NAME: this kernel has no netem (sch_netem): strata-delayer adds the delays"
                fi
            fi
            # the host's egress carries the delay and the rate; the bridge's
            # port towards it the rate: the link is limited both ways
            if [ "$delay_by" = delayer ]; then
                shape "$h" eth0 "$rate" 0
                echo "$i $(to_ms "$delay")" >> "$DIR/delays"
                by=" (strata-delayer)"
            else
                shape "$h" eth0 "$rate" "$delay"
                echo "$i 0" >> "$DIR/delays"
                by=""
            fi
            shape $TAG-br "p$i" "$rate" 0
            echo "host $i: $NET.$((i + 1)) rate $rate delay $delay$by" >> "$DIR/links"
        fi
        i=$((i + 1))
    done
    key="$DIR/cluster.key"
    # a new key per run (keygen refuses to overwrite an old one), and no
    # output of an earlier run where wait_word looks for this run's address
    rm -f "$key" "$DIR"/coordinator* "$DIR"/worker* "$DIR"/delayer*
    "$build/cli/strata" keygen "$key" >/dev/null
    delayed=0
    if [ "$delay_by" = delayer ] && [ $any_delay = 1 ]; then
        [ -x "$DELAYER" ] || die "no $DELAYER (build it: ninja -C $build)"
        delayed=1
        # the last stage's results reach the coordinator through a delayer
        set -- --results "tcp://127.0.0.1:$RESULTS_PORT" --advertise "$NET.1" "$@"
    fi
    ip netns exec "$(ns 0)" "$build/coordinator/strata-coordinator" --model "$model" \
        --listen "tcp://$NET.1:0" --cluster-key "$key" --wire "$wire" \
        --min-workers $((n - 1)) "$@" > "$DIR/coordinator" 2> "$DIR/coordinator.err" &
    echo $! >> "$DIR/pids"
    addr=$(wait_word "$DIR/coordinator" "listening on")
    echo "$addr" > "$DIR/addr"
    [ $delayed = 0 ] || TO_HOST=127.0.0.1 start_delayer 0 $RESULTS_PORT $RESULTS_PORT
    i=1
    while [ $i -lt "$n" ]; do
        if [ $delayed = 1 ]; then # the data plane behind a delayer, which is advertised
            start_delayer $i $FRONT_PORT $DATA_PORT
            start_delayer $i $CONTROL_FRONT $CONTROL_PORT
            data="--listen tcp://$NET.$((i + 1)):$DATA_PORT --advertise tcp://$NET.$((i + 1)):$FRONT_PORT"
            data="$data --control-port $CONTROL_PORT"
            data="$data --advertise-control tcp://$NET.$((i + 1)):$CONTROL_FRONT"
        else
            data="--listen tcp://$NET.$((i + 1)):0"
        fi
        # shellcheck disable=SC2086 # data: flags and values
        ip netns exec "$(ns $i)" "$build/worker/strata-worker" --coordinator "$addr" \
            --model "$model" $data --cluster-key "$key" \
            --threads "$threads" --name "h$i" > "$DIR/worker$i" 2> "$DIR/worker$i.err" &
        echo $! >> "$DIR/pids"
        wait_word "$DIR/worker$i" "listening on" >/dev/null
        i=$((i + 1))
    done
    echo "$delay_by" > "$DIR/delay_by"
    trap - EXIT
    echo "$NAME: $n hosts up; coordinator $addr (key $key); logs in $DIR"
    cat "$DIR/links" 2>/dev/null || true
}

down() {
    if [ -f "$DIR/pids" ]; then
        for p in $(cat "$DIR/pids"); do kill "$p" 2>/dev/null || true; done
        # a worker leaves its coordinator before it exits: give the processes
        # DOWN_WAIT_TENTHS to end while the network is still there, then
        # SIGKILL the rest (a leave towards a dead coordinator can hang)
        dw_try=0
        while [ $dw_try -lt $DOWN_WAIT_TENTHS ]; do
            alive=0
            for p in $(cat "$DIR/pids"); do kill -0 "$p" 2>/dev/null && alive=1; done
            [ $alive = 1 ] || break
            dw_try=$((dw_try + 1)); sleep 0.1
        done
        for p in $(cat "$DIR/pids"); do kill -9 "$p" 2>/dev/null || true; done
    fi
    n=$(cat "$DIR/hosts" 2>/dev/null || echo 0)
    i=0
    while [ $i -lt "$n" ]; do ip netns del "$(ns $i)" 2>/dev/null || true; i=$((i + 1)); done
    ip netns del $TAG-br 2>/dev/null || true
    rm -f "$DIR/hosts" "$DIR/pids" "$DIR/links" "$DIR/addr" "$DIR/delays" "$DIR/delay_by"
    echo "$NAME: down"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) up "$@";;
down) down;;
exec) i=$1; shift; exec ip netns exec "$(ns "$i")" "$@";;
delay) # delay I PORT TO_PORT: in delayer mode the host's delays; with netem none
    [ -e "$DIR/hosts" ] || die "not up"
    [ $# = 3 ] || die "delay I PORT TO_PORT"
    DELAYER=${DELAYER:-${BUILD_DIR:-build}/deploy/strata-delayer}
    [ -x "$DELAYER" ] || die "no $DELAYER (set BUILD_DIR or DELAYER)"
    start_delayer "$1" "$2" "$3"
    tail -n 1 "$DIR/pids";;
status) exec ip netns exec "$(ns 0)" "${STRATA:-build/cli/strata}" status \
        --coordinator "$(cat "$DIR/addr")" --cluster-key "$DIR/cluster.key" "$@";;
*) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2;;
esac
