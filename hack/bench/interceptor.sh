#!/usr/bin/env bash
# Loopback benchmark of the interceptor's request path (pkg/proxy), side by side in one run:
#   1. for each of SCENARIOS (body:connections; "tiny:64 16k:64 tiny:512" by default: a 2-byte
#      answer over 64 connections, a 16 KiB one over 64, a 2-byte one over 512; a body is "tiny",
#      a response of <N>k or <N>m, e.g. 256k or 1m, or an upload up<size>, e.g. up16k or up1m: a POST
#      with that Content-Length answered with 2 bytes), wrk -t2 -cN:
#      backend direct vs through the proxy (its event loops, the default) vs through the proxy with
#      the event loops off (proxy-std, --event-loops=0: net/http serves every request, as on the
#      TLS port) vs through nginx
#      (2 workers, upstream keepalive) vs through nginx also setting the X-Forwarded-* headers the
#      proxy sets (nginx-xf: the same work) vs through hack/bench/relay (a Go relay with no HTTP
#      logic at all, as a reference), interleaved for ROUNDS rounds, with each one's CPU per request;
#   2. latency at a fixed RATE req/s (hack/bench/rate, open loop) for the same three targets;
#   3. cold start (hack/bench/coldstart): endpoint ready -> held request forwarded, and HELD
#      requests held at once (proxy RSS, all answered); with BEFORE, for that build too.
# SECTIONS (default "wrk rate cold") picks the parts to run; TARGETS (default all six) the wrk targets.
# BEFORE=<git revision> adds the target "before": hack/bench/proxy built from that revision (git
# archive into the temporary folder), with its defaults, for before/after figures in one run.
# Needs wrk and nginx (apt-get install -y wrk nginx-light). Every process it starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

DUR=${DUR:-10s}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-1000}
RATE_DUR=${RATE_DUR:-10s}
TRIALS=${TRIALS:-100}
HELD=${HELD:-10000}
SCENARIOS=${SCENARIOS:-tiny:64 16k:64 tiny:512}
SECTIONS=${SECTIONS:-wrk rate cold}
TARGETS=${TARGETS:-direct proxy proxy-std nginx nginx-xf relay}

source hack/bench/lib.sh
bench_init httpscale-bench
ulimit -n 65536 2>/dev/null || echo "warning: could not raise the open-file limit; the held-requests run may fail" >&2

go build -o "$work/" ./hack/bench/backend ./hack/bench/proxy ./hack/bench/relay ./hack/bench/rate ./hack/bench/coldstart
if [[ -n ${BEFORE:-} ]]; then
	mkdir "$work/before-src"
	git archive "$BEFORE" | tar -x -C "$work/before-src"
	(cd "$work/before-src" && go build -o "$work/proxy-before" ./hack/bench/proxy)
	[[ " $TARGETS " == *" before "* ]] || TARGETS="$TARGETS before"
fi
BE=$(free_port); PX=$(free_port); AD=$(free_port); NG=$(free_port); CB=$(free_port); RL=$(free_port)
PS=$(free_port); AS=$(free_port); NX=$(free_port)

spawn backend_pid "$work/backend" -listen "127.0.0.1:$BE"
spawn proxy_pid "$work/proxy" -listen "127.0.0.1:$PX" -admin "127.0.0.1:$AD" -backend "127.0.0.1:$BE" -cold-backend "127.0.0.1:$CB"
spawn proxystd_pid "$work/proxy" -event-loops=0 -listen "127.0.0.1:$PS" -admin "127.0.0.1:$AS" -backend "127.0.0.1:$BE"
spawn relay_pid "$work/relay" -listen "127.0.0.1:$RL" -backend "127.0.0.1:$BE"
PB=$(free_port); AB=$(free_port); before_pid=; waits=()
if [[ -n ${BEFORE:-} ]]; then
	spawn before_pid "$work/proxy-before" -listen "127.0.0.1:$PB" -admin "127.0.0.1:$AB" -backend "127.0.0.1:$BE" -cold-backend "127.0.0.1:$CB"
	waits=("$PB" "$AB")
fi
nginx_conf <<CONF
  # Uploads are streamed to the backend as the proxy streams them (no temporary file), any size.
  client_max_body_size 0;
  proxy_request_buffering off;
  upstream backend { server 127.0.0.1:$BE; keepalive 512; }
  server {
    listen 127.0.0.1:$NG;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$NX;
    location / {
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Host \$http_host;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
}
CONF
start_nginx
for p in "$BE" "$PX" "$AD" "$NG" "$NX" "$RL" "$PS" "$AS" "${waits[@]}"; do wait_port "$p"; done
report_load
targets=$TARGETS
# kib SIZE: a size such as 16k or 1m in KiB.
kib() { case $1 in *k) echo "${1%k}" ;; *m) echo $(( ${1%m} * 1024 )) ;; *) echo "bad size $1" >&2; return 1 ;; esac; }
declare -A port=([direct]=$BE [proxy]=$PX [proxy-std]=$PS [nginx]=$NG [nginx-xf]=$NX [relay]=$RL [before]=$PB)
for scenario in $SCENARIOS; do
[[ " $SECTIONS " == *" wrk "* ]] || break
body=${scenario%%:*}; conns=${scenario##*:}
path=/; wrkargs=()
case $body in
tiny) ;;
up*)
	printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/octet-stream"\nwrk.body = string.rep("x", %d)\n' \
		$(( $(kib "${body#up}") * 1024 )) >"$work/upload.lua"
	wrkargs=(-s "$work/upload.lua") ;;
*) path=/$(kib "$body")k ;;
esac
declare -A sum=() cpu=() reqs=()
echo "== wrk -t2 -c$conns -d$DUR, $body body ($path${wrkargs[*]:+, POST}), $ROUNDS interleaved rounds"
for r in $(seq "$ROUNDS"); do
	for t in $targets; do
		case $t in proxy) procs="$proxy_pid" ;; before) procs="$before_pid" ;; proxy-std) procs="$proxystd_pid" ;; nginx | nginx-xf) procs=$(nginx_pids) ;; relay) procs="$relay_pid" ;; *) procs="$backend_pid" ;; esac
		wrk_round "$r" "$t" 9 "$procs" -t2 -c"$conns" -d"$DUR" --latency "${wrkargs[@]}" "http://127.0.0.1:${port[$t]}$path"
	done
done
printf 'mean req/s:'
for t in $targets; do awk -v s="${sum[$t]}" -v r="$ROUNDS" -v t="$t" 'BEGIN { printf "  %s %.0f", t, s/r }'; done
echo
# ratio A B: A's throughput over B's, when both ran.
ratio() { [[ -n ${sum[$1]:-} && -n ${sum[$2]:-} ]] && awk -v a="${sum[$1]}" -v b="${sum[$2]}" -v n="$1/$2" 'BEGIN { if (b > 0) printf "%s %.2f  ", n, a/b }' || true; }
{ ratio proxy direct; ratio proxy nginx; ratio proxy before; ratio before nginx; ratio proxy nginx-xf
  ratio proxy-std direct; ratio proxy-std nginx; ratio nginx direct; ratio relay nginx; echo; }
cpu_report "" 9 $targets
unset sum cpu reqs
done

[[ " $SECTIONS " == *" rate "* ]] || { [[ " $SECTIONS " == *" cold "* ]] || exit 0; }
if [[ " $SECTIONS " == *" rate "* ]]; then
echo "== fixed rate $RATE req/s for $RATE_DUR (open loop; latency from the intended send time)"
for t in direct proxy nginx ${before_pid:+before}; do
	"$work/rate" -url "http://127.0.0.1:${port[$t]}/" -rate "$RATE" -duration "$RATE_DUR" -name "$t"
done
fi
[[ " $SECTIONS " == *" cold "* ]] || exit 0

echo "== cold start"
"$work/coldstart" -proxy "http://127.0.0.1:$PX" -admin "http://127.0.0.1:$AD" -listen "127.0.0.1:$CB" \
	-trials "$TRIALS" -held "$HELD" -pid "$proxy_pid"
if [[ -n $before_pid ]]; then
	echo "== cold start, before"
	"$work/coldstart" -proxy "http://127.0.0.1:$PB" -admin "http://127.0.0.1:$AB" -listen "127.0.0.1:$CB" \
		-trials "$TRIALS" -held "$HELD" -pid "$before_pid"
fi
