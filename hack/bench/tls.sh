#!/usr/bin/env bash
# Loopback benchmark of the interceptor's TLS port (pkg/tlsterm + pkg/proxy, hack/bench/tlsproxy)
# against nginx terminating TLS with the same certificate and key, in one run, interleaved:
#   handshake: wrk -t2 -cHS_CONNS with "Connection: close", so every request is a new TCP connection
#              and a TLS handshake: requests/s = handshakes/s. wrk resumes its TLS session when the
#              server allows it, so this runs twice: "handshake" against servers with their default
#              session resumption (resumed handshakes: no certificate signature) and "full-handshake"
#              against a second instance of each with resumption off (tickets and session cache);
#   keepalive: wrk -t2 -cKA_CONNS over warm TLS connections (HTTP/1.1 keep-alive), with three
#              cleartext references in the same rounds: the proxy's cleartext port (fast path on event
#              loops, hack/bench/proxy), the same with net/http serving every request (proxy-std-http,
#              the path TLS requests take) and nginx without TLS (nginx-http).
# Both forward to the same backend (hack/bench/backend, 2-byte answer) over upstream keep-alive; nginx
# runs 2 workers (one per core here). The certificate is ECDSA P-256 (openssl), TLS 1.2 and 1.3 allowed
# on both; each target's CPU per request is reported. Needs wrk, nginx and openssl. Every process it
# starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

DUR=${DUR:-10s}
ROUNDS=${ROUNDS:-3}
HS_CONNS=${HS_CONNS:-32}
KA_CONNS=${KA_CONNS:-64}

source hack/bench/lib.sh
bench_init httpscale-tlsbench

nice -n 19 go build -o "$work/" ./hack/bench/backend ./hack/bench/tlsproxy ./hack/bench/proxy
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench.example.com \
	-addext subjectAltName=DNS:bench.example.com -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null
BE=$(free_port); PX=$(free_port); NG=$(free_port); PF=$(free_port); NF=$(free_port); HP=$(free_port); HA=$(free_port); SP=$(free_port); SA=$(free_port); NH=$(free_port)

spawn backend_pid "$work/backend" -listen "127.0.0.1:$BE"
spawn proxy_pid "$work/tlsproxy" -listen "127.0.0.1:$PX" -backend "127.0.0.1:$BE" -cert "$work/tls.crt" -key "$work/tls.key"
spawn full_pid "$work/tlsproxy" -no-resumption -listen "127.0.0.1:$PF" -backend "127.0.0.1:$BE" -cert "$work/tls.crt" -key "$work/tls.key"
spawn http_pid "$work/proxy" -listen "127.0.0.1:$HP" -admin "127.0.0.1:$HA" -backend "127.0.0.1:$BE"
spawn std_pid "$work/proxy" -fast-http1=false -listen "127.0.0.1:$SP" -admin "127.0.0.1:$SA" -backend "127.0.0.1:$BE"
nginx_conf <<CONF
  upstream backend { server 127.0.0.1:$BE; keepalive 512; }
  server {
    listen 127.0.0.1:$NG ssl http2;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
  server {
    listen 127.0.0.1:$NF ssl;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets off;
    ssl_session_cache off;
    location / {
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
  server {
    listen 127.0.0.1:$NH;
    location / {
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
}
CONF
start_nginx
for p in "$BE" "$PX" "$NG" "$PF" "$NF" "$HP" "$SP" "$NH"; do wait_port "$p"; done

for t in proxy nginx; do
	p=$PX; [[ $t == nginx ]] && p=$NG
	printf '%s negotiates: %s\n' "$t" "$(openssl s_client -connect "127.0.0.1:$p" -servername bench.example.com </dev/null 2>/dev/null |
		awk '/^New,/ {v=$2" "$5} /Server Temp Key/ {k=$4; sub(/,$/, "", k)} END {print v, k}')"
done
report_load
declare -A port=([proxy]=$PX [nginx]=$NG [proxy-full]=$PF [nginx-full]=$NF [proxy-http]=$HP [proxy-std-http]=$SP [nginx-http]=$NH)
for mode in handshake full-handshake keepalive; do
	declare -A sum=() cpu=() reqs=()
	args=(-t2 -c"$KA_CONNS"); targets="proxy nginx proxy-http proxy-std-http nginx-http"
	[[ $mode == handshake ]] && args=(-t2 -c"$HS_CONNS" -H "Connection: close") && targets="proxy nginx"
	[[ $mode == full-handshake ]] && args=(-t2 -c"$HS_CONNS" -H "Connection: close") && targets="proxy-full nginx-full"
	echo "== $mode: wrk ${args[*]} -d$DUR, $ROUNDS interleaved rounds"
	for r in $(seq "$ROUNDS"); do
		for t in $targets; do
			case $t in proxy) procs=$proxy_pid ;; proxy-full) procs=$full_pid ;; proxy-http) procs=$http_pid ;; proxy-std-http) procs=$std_pid ;; *) procs=$(nginx_pids) ;; esac
			scheme=https; [[ $t == *-http ]] && scheme=http
			wrk_round "$r" "$t" 14 "$procs" "${args[@]}" -d"$DUR" --latency "$scheme://127.0.0.1:${port[$t]}/"
		done
	done
	line="$mode mean req/s:"
	for t in $targets; do line+=$(awk -v a="${sum[$t]}" -v r="$ROUNDS" -v t="$t" 'BEGIN {printf "  %s %.0f", t, a/r}'); done
	a=proxy b=nginx; [[ $mode == full-handshake ]] && a=proxy-full b=nginx-full
	echo "$line$(awk -v p="${sum[$a]}" -v n="${sum[$b]}" -v a="$a" -v b="$b" 'BEGIN {printf "  %s/%s %.2f", a, b, p/n}')"
	cpu_report "$mode " 14 $targets
	unset sum cpu reqs
done
