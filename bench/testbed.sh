#!/usr/bin/env bash
# testbed.sh - Strata against llama.cpp's RPC backend over rate-limited
# links (issue 17): a TinyLlama-shaped Q8_0 model split over 3 workers of
# 1 thread each, every worker in its own network namespace made by
# deploy/testbed.sh (host 0: the coordinator or llama.cpp's client; hosts
# 1..3: the workers or one ggml-rpc-server each), for each link rate x
# Strata wire dtype, one table.
#
# Per cell (link L = RATE:DELAY, wire W), in this order on the same namespaces:
#   Strata   deploy/testbed.sh up 4 --link L --wire W --threads 1
#            -- --split SPLIT; once every link is measured (and, with auto,
#            every boundary's dtype chosen from a measured link), from
#            host 0 with tests/cluster/loadgen: one warm-up request; decode
#            = one request of --gen ids after an 8-id prompt, (ids - 1) /
#            (time of the last id - time of the first), coordinator clock;
#            TTFT = one request of a --prompt-id prompt and 1 id, client
#            clock from submit to the first id; aggregate = --sessions
#            requests at once, --session-gen ids each after 8-id prompts,
#            all ids / (last done - first submit). Prompts are random ids
#            (seeded), never a prefix of an earlier one.
#   llama.cpp the Strata processes stopped, a ggml-rpc-server (-t 1, -c:
#            its tensor cache, so a load does not resend the weights) in
#            each worker host, behind a strata-delayer with that host's
#            delay when deploy/testbed.sh adds the delays by delayers (no
#            netem), as Strata's workers are; from host 0: llama-bench --rpc ... -ngl 99
#            -p PROMPT -n GEN -r 1 -t 1: decode = its tg tok/s, TTFT =
#            PROMPT / its pp tok/s (the first id comes from the prompt's
#            logits); then llama-server --rpc ... -np SESSIONS -t 1 and
#            SESSIONS /completion requests at once (same prompts and
#            lengths as Strata's, ignore_eos): aggregate as above.
# Strata and llama.cpp thus alternate cell by cell: a load on the machine
# (a shared one) hits both alike. llama.cpp's figures do not depend on W;
# the table shows each cell's and the summary the median per link. Each
# measured command's line in the log says how much of the CPUs other
# processes (neither the command nor the system under test) used meanwhile.
#
# The delays come from tc netem where the kernel has it, else from
# strata-delayer in front of every data-plane listener (deploy/testbed.sh,
# docs/testbed.md): each connection's bytes wait their sending host's delay.
#
# Usage: bench/testbed.sh [--links "1gbit:1ms 100mbit:5ms"] [--wires "f32 f16 bf16 auto auto+i8"]
#                         [--delay D] [--gen 64] [--prompt 512] [--sessions 8]
#                         [--session-gen 32] [--split 8,7,7] [--no-llama]
#                         [--coordinator-flags "FLAGS"]
# A link without ":DELAY" gets --delay's (default 0). A mixed cell gives
# each worker host its own link, A+B+C for hosts 1, 2 and 3: the boundary
# from stage 0 to stage 1 runs over hosts 1 and 2's links, the one from
# stage 1 to stage 2 over hosts 2 and 3's (a link limits its host's egress
# and ingress), e.g. "10gbit:0.1ms+10gbit:0.1ms+100mbit:5ms". i8 only when named
# in --wires (lossy): "i8" everywhere, or "auto+i8" (--wire auto --allow-i8,
# so auto may choose i8 where the accuracy gate passes). Environment: BUILD_DIR (default
# build), BENCH_DIR (the model; default /tmp/strata-bench), LLAMA_REF
# (default ~/.cache/llama-ref, made by shared/tools/build-llama-ref.sh),
# STRATA_TESTBED (deploy/testbed.sh's folder). Needs root. Not run by CI.
set -euo pipefail
shopt -s inherit_errexit

links="1gbit:1ms 100mbit:5ms"
wires="f32 f16 bf16 auto"
delay=0
gen=64
prompt=512
sessions=8
sgen=32
split="8,7,7" # 22 layers; the last stage also holds the output head
coord_flags=""  # more coordinator flags, e.g. "--pipeline-depth 4" (split on spaces)
llama=1
short=8              # ids in the prompts of the decode and aggregate requests
workers=3
rpc_port=50052
http_port=8089
ready_timeout=300    # s for a cluster to serve on measured links, or llama-server to load
while [ $# -gt 0 ]; do
    case "$1" in
    --links) links="$2"; shift 2 ;;
    --wires) wires="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --sessions) sessions="$2"; shift 2 ;;
    --session-gen) sgen="$2"; shift 2 ;;
    --split) split="$2"; shift 2 ;;
    --coordinator-flags) coord_flags="$2"; shift 2 ;;
    --no-llama) llama=0; shift ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "testbed.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

# every link as RATE:DELAY (each host's of a mixed cell A+B+C too)
withdelay() { case $1 in *:*) echo "$1" ;; *) echo "$1:$delay" ;; esac; }
links=$(for l in $links; do
    h=""; for x in ${l//+/ }; do h="$h${h:++}$(withdelay "$x")"; done; echo "$h"
done)
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
ref="${LLAMA_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-ref}"
dir="${BENCH_DIR:-/tmp/strata-bench}"
state="${STRATA_TESTBED:-/tmp/strata-testbed}"
export STRATA_TESTBED="$state" STRATA="$build/cli/strata"
tb="$root/deploy/testbed.sh"
libs="$ref/work/build/bin"
[ "$(id -u)" = 0 ] || { echo "testbed.sh: needs root (network namespaces)" >&2; exit 2; }
for b in "$build/cli/strata" "$build/tests/cluster/loadgen"; do
    [ -x "$b" ] || { echo "testbed.sh: no $b (build first or set BUILD_DIR)" >&2; exit 2; }
done
if [ "$llama" = 1 ]; then
    for b in llama-bench llama-server ggml-rpc-server; do
        [ -x "$ref/bin/$b" ] || { echo "testbed.sh: no $ref/bin/$b: build llama.cpp with" \
            "shared/tools/build-llama-ref.sh or set LLAMA_REF (or --no-llama)" >&2; exit 2; }
    done
fi
for w in $wires; do
    case $w in f32|f16|bf16|i8|auto|auto+i8) ;; *) echo "testbed.sh: --wires: '$w' is not a wire dtype" >&2; exit 2 ;; esac
done

mkdir -p "$dir"
model="$dir/tinyllama-q8_0.gguf" # as bench/engine.sh makes it
if [ ! -s "$model" ]; then
    "$build/cli/strata" convert synth "$model.tmp" --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
        --ffn 5632 --vocab 32000 --type q8_0 --seed 1
    mv "$model.tmp" "$model"
fi
log="$dir/testbed.$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$log"
echo "logs: $log"
addr_of() { echo "10.233.0.$(($1 + 1))"; } # deploy/testbed.sh's host I

# requests FILE N LEN GEN SEED - N loadgen requests of LEN random ids, GEN ids each
requests() {
    python3 - "$@" <<'EOF'
import json, random, sys
path, n, ln, gen, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
with open(path, "w") as f:
    for i in range(n):
        ids = [rng.randrange(3, 32000) for _ in range(ln)]
        f.write(json.dumps({"prompt_ids": ids, "n": gen, "temp": 0, "session": seed * 1000 + i}) + "\n")
EOF
}

# meter OUT ERR IN PIDS -- CMD... - runs CMD (stdin IN, stdout OUT, stderr
# ERR); prints the share of the CPUs, in %, that other processes used
# meanwhile: /proc/stat busy time less CMD's and the PIDS' (the system
# under test) own. Fails when CMD does.
meter() {
    python3 - "$@" <<'EOF'
import os, resource, subprocess, sys, time
out, err, inp, pids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
cmd = sys.argv[sys.argv.index("--") + 1:]
tick = os.sysconf("SC_CLK_TCK")
def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / tick
def pids_cpu():
    s = 0.0
    for p in pids:
        try:
            with open("/proc/%s/stat" % p) as f:
                v = f.read().rsplit(")", 1)[1].split()
            s += (int(v[11]) + int(v[12])) / tick  # utime, stime
        except OSError:
            pass
    return s
r0, b0, p0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy(), pids_cpu(), time.monotonic()
with open(inp) as i, open(out, "w") as o, open(err, "w") as e:
    rc = subprocess.run(cmd, stdin=i, stdout=o, stderr=e).returncode
r1, b1, p1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), busy(), pids_cpu(), time.monotonic()
own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime) + (p1 - p0)
print("%.0f" % max(0.0, 100.0 * ((b1 - b0) - own) / ((t1 - t0) * os.cpu_count())))
sys.exit(rc)
EOF
}

# summary KIND FILE - one figure from loadgen's results (decode tok/s,
# ttft s, aggregate tok/s); fails on a request that did not end well
summary() {
    python3 - "$@" <<'EOF'
import json, sys
kind, rs = sys.argv[1], [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
for r in rs:
    if not r["ok"] or r["stage"] != "done":
        sys.exit("testbed.sh: a request failed: %s %s" % (r.get("error"), sys.argv[2]))
if kind == "decode":
    t = rs[0]["times_ns"]
    print("%.2f" % ((len(t) - 1) / ((t[-1] - t[0]) * 1e-9)))
elif kind == "ttft":
    print("%.2f" % (rs[0]["t_first"] - rs[0]["t_submit"]))
else:
    n = sum(len(r["ids"]) for r in rs)
    print("%.2f" % (n / (max(r["t_done"] for r in rs) - min(r["t_submit"] for r in rs))))
EOF
}

# ready - waits until the plan serves on 3 stages, every link between
# workers is measured and the plan stayed the same for 3 s after that
ready() {
    python3 - "$ready_timeout" "$tb" <<'EOF'
import json, subprocess, sys, time
limit, tb = float(sys.argv[1]), sys.argv[2]
deadline, why, epoch, calm = time.monotonic() + limit, "", None, 0
calm_polls = 3  # the same plan this many polls (1 s apart) after the links are measured
while time.monotonic() < deadline:
    r = subprocess.run([tb, "status", "--json"], capture_output=True, text=True)
    if r.returncode == 0:
        s = json.loads(r.stdout)
        st = (s.get("plan") or {}).get("stages") or []  # no plan yet: null
        links = s.get("links") or []
        # a boundary's live reason (re-evaluated on heartbeats, docs/wire-format.md)
        # once there is one, else the plan's (auto) or none (a fixed dtype)
        live = [(x.get("live_dtype", x["in_dtype"]) + ("+zstd" if x.get("live_zstd") else ""),
                 x.get("live_why", x["in_why"])) for x in st[1:]]
        why = "%d stages, %d/%d links measured, boundaries %s" % (
            len(st), sum(l["measured"] for l in links), len(links),
            ["%s: %s" % b for b in live])
        # measured links move an auto choice by a replan within a heartbeat
        # or two; with auto, wait for reasons evaluated on the measured links
        ok = s["serving"] and len(st) == 3 and links and all(l["measured"] for l in links) and \
            all(x["in_why"] == "" or "(measured)" in w for x, (_, w) in zip(st[1:], live))
        calm = calm + 1 if ok and s["plan"]["epoch"] == epoch else 0
        epoch = s["plan"]["epoch"] if ok else None
        if calm >= calm_polls:
            print(why)
            sys.exit(0)
    time.sleep(1)
sys.exit("testbed.sh: the cluster was not ready in %.0f s: %s" % (limit, why))
EOF
}

rpc_pids=""
strata_pids() { cat "$state/pids" 2>/dev/null | tr '\n' ' '; }
stop_pids() { # stop_pids PIDS - SIGTERM, 10 s, SIGKILL
    for p in $1; do kill "$p" 2>/dev/null || true; done
    for _ in $(seq 100); do
        alive=0
        for p in $1; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 1 ] || return 0
        sleep 0.1
    done
    for p in $1; do kill -9 "$p" 2>/dev/null || true; done
}
cleanup() {
    [ -z "$rpc_pids" ] || stop_pids "$rpc_pids"
    rpc_pids=""
    [ ! -e "$state/hosts" ] || "$tb" down >/dev/null
}
trap cleanup EXIT

strata_cell() { # strata_cell TAG WIRE LINK - "decode ttft aggregate others%" into TAG.result
    c="$log/$1"
    largs=() # a mixed cell A+B+C: host 1's link A, host 2's B, host 3's C
    for x in ${3//+/ }; do largs+=(--link "$x"); done
    wire=$2 i8=() # auto+i8: --wire auto --allow-i8 (i8 where its accuracy gate passes)
    [ "$wire" != auto+i8 ] || { wire=auto; i8=(--allow-i8); }
    "$tb" up $((workers + 1)) "${largs[@]}" --model "$model" --build "$build" \
        --wire "$wire" --threads 1 -- --split "$split" "${i8[@]}" $coord_flags >"$c-up.txt" 2>&1 ||
        { cat "$c-up.txt" >&2; return 1; }
    ready >"$c-ready.txt"
    a=$(cat "$state/addr")
    lg=("$tb" exec 0 "$build/tests/cluster/loadgen" "$a" --key "$state/cluster.key" --timeout-ms 900000)
    pids=$(strata_pids)
    requests "$c-warm.req" 1 "$short" 8 1
    requests "$c-decode.req" 1 "$short" "$gen" 2
    requests "$c-ttft.req" 1 "$prompt" 1 3
    requests "$c-agg.req" "$sessions" "$short" "$sgen" 4
    meter "$c-warm.json" "$c-warm.err" "$c-warm.req" "$pids" -- "${lg[@]}" >/dev/null
    o1=$(meter "$c-decode.json" "$c-decode.err" "$c-decode.req" "$pids" -- "${lg[@]}")
    o2=$(meter "$c-ttft.json" "$c-ttft.err" "$c-ttft.req" "$pids" -- "${lg[@]}")
    o3=$(meter "$c-agg.json" "$c-agg.err" "$c-agg.req" "$pids" -- "${lg[@]}")
    "$tb" status >"$c-status.txt" 2>&1 || true
    d=$(summary decode "$c-decode.json")
    t=$(summary ttft "$c-ttft.json")
    g=$(summary agg "$c-agg.json")
    echo "$d $t $g $(( (o1 + o2 + o3) / 3 ))" >"$c.result"
    stop_pids "$pids" # the namespaces stay, for llama.cpp
}

# the llama-server client, run in host 0: TAG REQS URL - llama-server's
# /completion for each loadgen request of REQS at once; prints the
# aggregate tok/s
cat >"$log/llama_client.py" <<'EOF'
import json, sys, threading, time, urllib.request
tag, reqs, url = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])], sys.argv[3]
got, errs = [0] * len(reqs), []
def one(i, r):
    body = json.dumps({"prompt": r["prompt_ids"], "n_predict": r["n"], "temperature": 0,
                       "ignore_eos": True, "cache_prompt": False}).encode()
    try:
        q = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(q, timeout=900) as f:
            got[i] = json.load(f)["tokens_predicted"]
    except Exception as e:  # reported below: the run fails
        errs.append("%s: %s" % (tag, e))
t0 = time.monotonic()
th = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(reqs)]
for t in th:
    t.start()
for t in th:
    t.join()
if errs:
    sys.exit("testbed.sh: llama-server: " + "; ".join(errs))
print("%.2f" % (sum(got) / (time.monotonic() - t0)))
EOF

llama_cell() { # llama_cell TAG - "decode ttft aggregate others%" into TAG-llama.result
    c="$log/$1-llama"
    rpc=""
    for i in $(seq "$workers"); do
        "$tb" exec "$i" env LD_LIBRARY_PATH="$libs" "$ref/bin/ggml-rpc-server" \
            -H "$(addr_of "$i")" -p "$rpc_port" -t 1 -c >"$c-rpc$i.txt" 2>&1 &
        rpc_pids="$rpc_pids $!"
        if [ "$(cat "$state/delay_by" 2>/dev/null)" = delayer ]; then
            # the server's link delay, as the workers' data planes have it
            BUILD_DIR="$build" "$tb" delay "$i" $((rpc_port + 1)) "$rpc_port" >/dev/null
            rpc="$rpc${rpc:+,}$(addr_of "$i"):$((rpc_port + 1))"
        else
            rpc="$rpc${rpc:+,}$(addr_of "$i"):$rpc_port"
        fi
    done
    for i in $(seq "$workers"); do # each server accepts connections
        for _ in $(seq 100); do
            "$tb" exec 0 bash -c "exec 3<>/dev/tcp/$(addr_of "$i")/$rpc_port" 2>/dev/null && break
            sleep 0.1
        done
    done
    o1=$(meter "$c-bench.csv" "$c-bench.err" /dev/null "$rpc_pids" -- "$tb" exec 0 env \
        LD_LIBRARY_PATH="$libs" "$ref/bin/llama-bench" -m "$model" --rpc "$rpc" -ngl 99 \
        -p "$prompt" -n "$gen" -r 1 -t 1 -o csv)
    url="http://$(addr_of 0):$http_port"
    "$tb" exec 0 env LD_LIBRARY_PATH="$libs" "$ref/bin/llama-server" -m "$model" --rpc "$rpc" \
        -ngl 99 -t 1 -np "$sessions" -c $((sessions * (prompt + gen))) \
        --host "$(addr_of 0)" --port "$http_port" >"$c-server.txt" 2>&1 &
    srv=$!
    rpc_pids="$srv $rpc_pids" # cleanup stops it too
    ok=0
    for _ in $(seq "$ready_timeout"); do
        if "$tb" exec 0 python3 -c "import urllib.request; urllib.request.urlopen('$url/health', timeout=2)" \
            2>/dev/null; then ok=1; break; fi
        sleep 1
    done
    [ $ok = 1 ] || { echo "testbed.sh: llama-server did not load: $(tail -n 3 "$c-server.txt")" >&2; return 1; }
    "$tb" exec 0 python3 "$log/llama_client.py" "$1" "$log/$1-warm.req" "$url" >/dev/null
    o2=$(meter "$c-agg.txt" "$c-agg.err" /dev/null "$rpc_pids $srv" -- \
        "$tb" exec 0 python3 "$log/llama_client.py" "$1" "$log/$1-agg.req" "$url")
    stop_pids "$srv" # before the servers it talks to as it exits
    stop_pids "$rpc_pids"
    rpc_pids=""
    python3 - "$c-bench.csv" "$prompt" "$(cat "$c-agg.txt")" "$(( (o1 + o2) / 2 ))" >"$c.result" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pp = float([r for r in rows if r["n_gen"] == "0"][0]["avg_ts"])
tg = float([r for r in rows if r["n_prompt"] == "0"][0]["avg_ts"])
print("%.2f %.2f %s %s" % (tg, int(sys.argv[2]) / pp, sys.argv[3], sys.argv[4]))
EOF
}

rows=()
cell=0
delay_by="?" # deploy/testbed.sh's choice, kept from the cells' state
for l in $links; do
    for w in $wires; do
        cell=$((cell + 1)) # repeated links get their own files
        tag="$cell-$(echo "$l" | tr ':+' '_-')-$w"
        strata_cell "$tag" "$w" "$l"
        delay_by=$(cat "$state/delay_by" 2>/dev/null || echo "?")
        s=$(cat "$log/$tag.result")
        echo "$l strata $w: decode tok/s, TTFT s, $sessions-session tok/s, others %: $s"
        echo "   $(cat "$log/$tag-ready.txt")"
        rows+=("$l|strata $w|$s")
        if [ "$llama" = 1 ]; then
            llama_cell "$tag"
            m=$(cat "$log/$tag-llama.result")
            echo "$l llama.cpp RPC (beside $w): $m"
            rows+=("$l|llama.cpp RPC|$m")
        fi
        "$tb" down >/dev/null
    done
done

echo
echo "TinyLlama-shaped Q8_0, $workers workers x 1 thread, --split $split; links rate:delay, delays by $delay_by;" \
     "decode: $gen ids; TTFT: $prompt-id prompt; aggregate: $sessions sessions x $sgen ids"
echo "$(grep -m 1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs; logs: $log"
echo
echo "| link | system | decode tok/s | TTFT s | $sessions-session tok/s | others' CPU % |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
for r in "${rows[@]}"; do
    IFS='|' read -r l sys fig <<<"$r"
    read -r d t a o <<<"$fig"
    echo "| $l | $sys | $d | $t | $a | $o |"
done
if [ "$llama" = 1 ]; then
    echo
    echo "llama.cpp RPC, median of its cells per link:"
    for l in $(printf '%s\n' $links | awk '!seen[$0]++'); do # each link once
        printf '%s\n' "${rows[@]}" | awk -F'|' -v l="$l" '$1 == l && $2 == "llama.cpp RPC" { print $3 }' |
            python3 -c '
import statistics, sys
v = [list(map(float, x.split())) for x in sys.stdin if x.strip()]
print("| %s | llama.cpp RPC (median) | %.2f | %.2f | %.2f | %.0f |" % ((sys.argv[1],) +
      tuple(statistics.median(c) for c in zip(*v))))' "$l"
    done
    echo
    echo "pairs (each Strata cell and the llama.cpp cell run right after it):" \
         "Strata / llama.cpp decode and 8-session tok/s, llama.cpp / Strata TTFT"
    printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [x.rstrip("\n").split("|") for x in sys.stdin if x.strip()]
r = {"decode": [], "aggregate": [], "ttft": []}
for (l, a, fa), (l2, b, fb) in zip(rows, rows[1:]):
    if a.startswith("strata") and b == "llama.cpp RPC" and l == l2:
        s, m = list(map(float, fa.split())), list(map(float, fb.split()))
        r["decode"].append(s[0] / m[0]); r["ttft"].append(m[1] / s[1]); r["aggregate"].append(s[2] / m[2])
        print("| %s | %s | decode %.2f | TTFT %.2f | aggregate %.2f |" % (l, a, r["decode"][-1], r["ttft"][-1], r["aggregate"][-1]))
if r["decode"]:
    print("medians over %d pairs: decode %.2f, TTFT %.2f, aggregate %.2f" % (
        len(r["decode"]), statistics.median(r["decode"]), statistics.median(r["ttft"]), statistics.median(r["aggregate"])))'
fi
