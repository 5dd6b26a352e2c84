# Helpers the loopback benchmarks (hack/bench/interceptor.sh, hack/bench/tls.sh) source: a temporary
# folder, processes started in the background and stopped by PID on exit, free ports, wrk runs with
# each target's CPU per request. Sourced, not run; expects set -euo pipefail from the script.

# bench_init NAME: makes the temporary folder $work (/tmp/NAME.XXXXXX) and stops every process
# started with spawn, then removes $work, when the script exits.
bench_init() {
	work=$(mktemp -d "/tmp/$1.XXXXXX")
	pids=()
	trap cleanup EXIT
}

# cleanup: TERM to every process started with spawn, KILL to those still running 5 s later.
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}

# spawn VAR CMD ARGS...: runs CMD in the background, sets VAR to its PID and stops it on exit.
spawn() {
	local var=$1
	shift
	"$@" &
	printf -v "$var" '%s' "$!"
	pids+=("$!")
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }

# nginx_conf: writes $work/nginx/nginx.conf: 2 workers, in the foreground, no access log, temporary
# files in $work/nginx, then the rest of the http block, and its closing brace, from standard input.
nginx_conf() {
	mkdir -p "$work/nginx/logs"
	{
		cat <<CONF
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
CONF
		cat
	} >"$work/nginx/nginx.conf"
}

# start_nginx: starts nginx on $work/nginx/nginx.conf, sets nginx_pid.
start_nginx() { spawn nginx_pid nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log"; }

# cpu_ticks PID...: user+system clock ticks used so far by the processes.
cpu_ticks() {
	local total=0 p
	for p in "$@"; do
		[[ -r /proc/$p/stat ]] || continue
		total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$total"
}
# nginx_pids: nginx's master and workers.
nginx_pids() { echo "$nginx_pid" $(ps --ppid "$nginx_pid" -o pid= 2>/dev/null); }

# report_load: prints the load average now and again when the script exits.
report_load() {
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	trap 'echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"; cleanup' EXIT
}

# wrk_round ROUND TARGET WIDTH "PIDS" WRK-ARGS...: one wrk run against TARGET, printed as a line
# (TARGET padded to WIDTH) with requests/s, p50, p99 and any errors; adds its requests/s to
# sum[TARGET], and the requests and the CPU ticks PIDS used meanwhile to reqs[TARGET] and
# cpu[TARGET] (associative arrays the caller declares).
wrk_round() {
	local r=$1 t=$2 width=$3 procs=$4 before used out rps n p50 p99 errs
	shift 4
	before=$(cpu_ticks $procs)
	out=$(wrk "$@")
	used=$(($(cpu_ticks $procs) - before))
	rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
	n=$(awk '/requests in/ {print $1}' <<<"$out")
	cpu[$t]=$((${cpu[$t]:-0} + used))
	reqs[$t]=$((${reqs[$t]:-0} + n))
	p50=$(awk '$1=="50%" {print $2}' <<<"$out")
	p99=$(awk '$1=="99%" {print $2}' <<<"$out")
	errs=$(awk '/Non-2xx|Socket errors/' <<<"$out")
	printf "round %d %-${width}s %10s req/s  p50 %-8s p99 %-8s %s\n" "$r" "$t" "$rps" "$p50" "$p99" "$errs"
	sum[$t]=$(awk -v a="${sum[$t]:-0}" -v b="$rps" 'BEGIN {print a+b}')
}

# cpu_report PREFIX WIDTH TARGET...: each target's CPU per request over its wrk rounds.
cpu_report() {
	local prefix=$1 width=$2 tck t
	shift 2
	tck=$(getconf CLK_TCK)
	for t in "$@"; do
		awk -v c="${cpu[$t]}" -v n="${reqs[$t]}" -v tck="$tck" -v t="$t" -v f="${prefix}CPU per request (user+system, all rounds) %-${width}s %.1f us\n" \
			'BEGIN { printf f, t, c/tck*1e6/n }'
	done
}
