#!/usr/bin/env bash
# Loopback benchmark of the interceptor's request path (pkg/proxy), side by side in one run:
#   1. for each of SCENARIOS (body:connections; "tiny:64 16k:64 tiny:512" by default: a 2-byte
#      answer over 64 connections, a 16 KiB one over 64, a 2-byte one over 512), wrk -t2 -cN:
#      backend direct vs through the proxy (its raw path on event
#      loops, the default) vs through the proxy with the raw path on a goroutine per connection
#      (proxy-g, --event-loops=0) vs through the proxy with its server-side fast path off
#      (proxy-std, net/http serves every request) vs through nginx
#      (2 workers, upstream keepalive) vs through nginx also setting the X-Forwarded-* headers the
#      proxy sets (nginx-xf: the same work) vs through hack/bench/relay (a Go relay with no HTTP
#      logic at all, as a reference), interleaved for ROUNDS rounds, with each one's CPU per request;
#   2. latency at a fixed RATE req/s (hack/bench/rate, open loop) for the same three targets;
#   3. cold start (hack/bench/coldstart): endpoint ready -> held request forwarded, and HELD
#      requests held at once (proxy RSS, all answered).
# SECTIONS (default "wrk rate cold") picks the parts to run.
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

work=$(mktemp -d /tmp/httpscale-bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || echo "warning: could not raise the open-file limit; the held-requests run may fail" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }

go build -o "$work/" ./hack/bench/backend ./hack/bench/proxy ./hack/bench/relay ./hack/bench/rate ./hack/bench/coldstart
BE=$(free_port); PX=$(free_port); AD=$(free_port); NG=$(free_port); CB=$(free_port); RL=$(free_port)
PS=$(free_port); AS=$(free_port); NX=$(free_port); PG=$(free_port); AG=$(free_port)

"$work/backend" -listen "127.0.0.1:$BE" &
backend_pid=$!; pids+=($backend_pid)
"$work/proxy" -listen "127.0.0.1:$PX" -admin "127.0.0.1:$AD" -backend "127.0.0.1:$BE" -cold-backend "127.0.0.1:$CB" &
proxy_pid=$!; pids+=($proxy_pid)
"$work/proxy" -fast-http1=false -listen "127.0.0.1:$PS" -admin "127.0.0.1:$AS" -backend "127.0.0.1:$BE" &
proxystd_pid=$!; pids+=($proxystd_pid)
"$work/proxy" -event-loops=0 -listen "127.0.0.1:$PG" -admin "127.0.0.1:$AG" -backend "127.0.0.1:$BE" &
proxyg_pid=$!; pids+=($proxyg_pid)
"$work/relay" -listen "127.0.0.1:$RL" -backend "127.0.0.1:$BE" &
relay_pid=$!; pids+=($relay_pid)
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
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
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log" &
nginx_pid=$!; pids+=($nginx_pid)
for p in "$BE" "$PX" "$AD" "$NG" "$NX" "$RL" "$PS" "$AS" "$PG" "$AG"; do wait_port "$p"; done

# cpu_ticks PID...: user+system clock ticks used so far by the processes (and nginx's workers).
cpu_ticks() {
	local total=0 p
	for p in "$@"; do
		[[ -r /proc/$p/stat ]] || continue
		total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$total"
}
nginx_pids() { echo "$nginx_pid" $(ps --ppid "$nginx_pid" -o pid= 2>/dev/null); }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
trap 'echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"; cleanup' EXIT
targets="direct proxy proxy-g proxy-std nginx nginx-xf relay"
declare -A port=([direct]=$BE [proxy]=$PX [proxy-g]=$PG [proxy-std]=$PS [nginx]=$NG [nginx-xf]=$NX [relay]=$RL)
for scenario in $SCENARIOS; do
[[ " $SECTIONS " == *" wrk "* ]] || break
body=${scenario%%:*}; conns=${scenario##*:}
path=/; [[ $body == 16k ]] && path=/16k
declare -A sum=() cpu=() reqs=()
echo "== wrk -t2 -c$conns -d$DUR, $body body ($path), $ROUNDS interleaved rounds"
for r in $(seq "$ROUNDS"); do
	for t in $targets; do
		case $t in proxy) procs="$proxy_pid" ;; proxy-g) procs="$proxyg_pid" ;; proxy-std) procs="$proxystd_pid" ;; nginx | nginx-xf) procs=$(nginx_pids) ;; relay) procs="$relay_pid" ;; *) procs="$backend_pid" ;; esac
		before=$(cpu_ticks $procs)
		out=$(wrk -t2 -c"$conns" -d"$DUR" --latency "http://127.0.0.1:${port[$t]}$path")
		used=$(( $(cpu_ticks $procs) - before ))
		rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
		n=$(awk '/requests in/ {print $1}' <<<"$out")
		cpu[$t]=$(( ${cpu[$t]:-0} + used )); reqs[$t]=$(( ${reqs[$t]:-0} + n ))
		p50=$(awk '$1=="50%" {print $2}' <<<"$out")
		p99=$(awk '$1=="99%" {print $2}' <<<"$out")
		errs=$(awk '/Non-2xx|Socket errors/' <<<"$out")
		printf 'round %d %-9s %10s req/s  p50 %-8s p99 %-8s %s\n' "$r" "$t" "$rps" "$p50" "$p99" "$errs"
		sum[$t]=$(awk -v a="${sum[$t]:-0}" -v b="$rps" 'BEGIN {print a+b}')
	done
done
awk -v d="${sum[direct]}" -v p="${sum[proxy]}" -v g="${sum[proxy-g]}" -v s="${sum[proxy-std]}" -v n="${sum[nginx]}" -v x="${sum[nginx-xf]}" -v f="${sum[relay]}" -v r="$ROUNDS" 'BEGIN {
	printf "mean req/s: direct %.0f  proxy %.0f  proxy-g %.0f  proxy-std %.0f  nginx %.0f  nginx-xf %.0f  relay %.0f\n", d/r, p/r, g/r, s/r, n/r, x/r, f/r
	printf "proxy/direct %.2f  proxy/nginx %.2f  proxy/nginx-xf %.2f  proxy/proxy-g %.2f  proxy-g/direct %.2f  proxy-g/nginx %.2f  proxy-std/direct %.2f  proxy-std/nginx %.2f  nginx/direct %.2f  relay/nginx %.2f\n", p/d, p/n, p/x, p/g, g/d, g/n, s/d, s/n, n/d, f/n }'
tck=$(getconf CLK_TCK)
for t in $targets; do
	awk -v c="${cpu[$t]}" -v n="${reqs[$t]}" -v tck="$tck" -v t="$t" 'BEGIN {
		printf "CPU per request (user+system, all rounds) %-9s %.1f us\n", t, c/tck*1e6/n }'
done
unset sum cpu reqs
done

[[ " $SECTIONS " == *" rate "* ]] || { [[ " $SECTIONS " == *" cold "* ]] || exit 0; }
if [[ " $SECTIONS " == *" rate "* ]]; then
echo "== fixed rate $RATE req/s for $RATE_DUR (open loop; latency from the intended send time)"
for t in direct proxy nginx; do
	"$work/rate" -url "http://127.0.0.1:${port[$t]}/" -rate "$RATE" -duration "$RATE_DUR" -name "$t"
done
fi
[[ " $SECTIONS " == *" cold "* ]] || exit 0

echo "== cold start"
"$work/coldstart" -proxy "http://127.0.0.1:$PX" -admin "http://127.0.0.1:$AD" -listen "127.0.0.1:$CB" \
	-trials "$TRIALS" -held "$HELD" -pid "$proxy_pid"
