#!/usr/bin/env bash
# make demo: the whole system on a local control plane inside a network namespace with two real nodes:
# httpscale released from this checkout (make release to the registry in the namespace) and installed
# from its OCI chart as real pods, and a sample
# app of real pods. Leaves everything running; `make demo-down` stops it. Needs root (it creates a
# network namespace) and the real-node tools (hack/tools.sh node, built on first use).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

name=${HTTPSCALE_DEMO_CLUSTER:-demo}
wakes=${HTTPSCALE_DEMO_WAKES:-5}
host=demo.httpscale.local
t0=$SECONDS
say() { printf '\n\033[1m==> [%4ds] %s\033[0m\n' "$((SECONDS - t0))" "$*"; }
cluster() { go run ./hack/cluster --name "$name" "$@"; }

say "Starting the local control plane '$name' with two real nodes (the first run builds Kubernetes, kwok, KEDA and the node tools from the Go module proxy: 15+ minutes)"
eval "$(cluster --real-nodes up)"

say "make release to the registry in the namespace (images, chart, SBOMs), then helm install oci://<registry>/httpscale/charts/httpscale"
cluster install-chart

image=$HTTPSCALE_SAMPLEAPP_IMAGE # from the env `cluster up` printed
say "Applying the sample app (real pods of $image, Deployment at 0 replicas, Service) and HTTPScaledObjects for $host and wake.$host"
app() { # name replicas scaledown
	cat <<YAML
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: demo}
spec:
  replicas: 0
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      nodeSelector: {type: real}
      terminationGracePeriodSeconds: 2
      containers:
      - name: app
        image: $image
        args: [--listen=0.0.0.0:8000, --zone=198.18.160.0/24=zone-a, --zone=198.18.161.0/24=zone-b]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: $1, namespace: demo}
spec:
  selector: {app: $1}
  ports: [{name: http, port: 80, targetPort: 8000}]
---
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: $1, namespace: demo}
spec:
  hosts: ["$2"]
  scaleTargetRef: {kind: Deployment, apiVersion: apps/v1, name: $1, service: $1, port: 80}
  replicas: {min: 0, max: 4}
  scaledownPeriod: $3
  scalingMetric: {concurrency: {targetValue: 10}}
YAML
}
{
	printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n'
	app sampleapp "$host" 30
	app wake "wake.$host" 1
} | kubectl apply -f -
kubectl wait -n demo --for=jsonpath='{.status.routing.interceptorsReady}'=2 hso/sampleapp hso/wake --timeout=2m >/dev/null

proxy=$(kubectl get service httpscale-interceptor -n httpscale-system -o jsonpath='{.spec.clusterIP}'):8080
replicas() { kubectl get deploy "${1:-sampleapp}" -n demo -o jsonpath='{.spec.replicas}/{.status.readyReplicas}'; }
kubectl get pods -n httpscale-system -o wide
say "Replicas now: $(replicas)"
say "Sending one request while the app is at zero, through the interceptor Service ($proxy)"
ans=/tmp/httpscale-demo-answer.$$
code=$(netns-exec curl -sS -m 90 -o "$ans" -D "$ans.h" -H "Host: $host" \
	-w '%{http_code} %{time_total}' "http://$proxy/hello" || true)
if [ "${code%% *}" != 200 ]; then
	echo "    no answer (${code:-none}); see $HTTPSCALE_CLUSTER_DIR/logs and kubectl logs -n httpscale-system -l app.kubernetes.io/component=interceptor"
	exit 1
fi
echo "    answered HTTP 200 after ${code#* }s (held while a real pod started): $(cat "$ans")"
grep -i '^x-httpscale-cold-start' "$ans.h" | sed 's/^/    /'
say "Replicas (desired/ready) after the request: $(replicas)"

say "Load burst: 100 concurrent requests, each held 500 ms by the app, for about 20 s"
cluster load --url "http://$proxy/burst?sleep=500ms" --host "$host" -c 100 -n 4000 &
load=$!
while kill -0 "$load" 2>/dev/null; do
	echo "    replicas $(replicas)   hpa: $(kubectl get hpa -n demo keda-hpa-sampleapp -o jsonpath='{.status.currentReplicas}->{.status.desiredReplicas}' 2>/dev/null)"
	sleep 2
done
wait "$load" || true
burst_end=$SECONDS

say "Real cold starts: $wakes wakes of app 'wake' from zero (each waits until KEDA reports it idle, scales it to 0, then times one request)"
times=()
for i in $(seq "$wakes"); do
	until [ "$(kubectl get scaledobject wake -n demo -o jsonpath='{.status.conditions[?(@.type=="Active")].status}')" = False ]; do sleep 1; done
	kubectl scale deployment wake -n demo --replicas=0 >/dev/null
	until [ -z "$(kubectl get pods -n demo -l app=wake -o name)" ]; do sleep 0.2; done
	out=$(netns-exec curl -sS -m 90 -o /dev/null -D "$ans.h" -H "Host: wake.$host" -w '%{http_code} %{time_total}' "http://$proxy/wake" || true)
	cold=$(sed -n 's/^[Xx]-[Hh]ttpscale-[Cc]old-[Ss]tart: *\([a-z]*\).*/\1/p' "$ans.h")
	echo "    wake $i: HTTP ${out%% *} after ${out#* }s (cold start: ${cold:-no})"
	[ "${out%% *}" = 200 ] && [ "$cold" = true ] && times+=("${out#* }")
done
rm -f "$ans" "$ans.h"
if [ "${#times[@]}" -gt 0 ]; then
	printf '%s\n' "${times[@]}" | sort -n | awk '{t[NR]=$1} END {
		p50=t[int((NR+1)/2)]; p99=t[int(NR*0.99+0.999)]; if (p99=="") p99=t[NR]
		printf "    %d cold starts, request -> answered (pod created, started, Ready): p50 %.3fs, p99 %.3fs, max %.3fs\n", NR, p50, p99, t[NR] }'
fi

say "Waiting for the return to zero of sampleapp (30 s without traffic, then KEDA's next poll)"
t1=$SECONDS
until [ "$(kubectl get deploy sampleapp -n demo -o jsonpath='{.spec.replicas}')" = 0 ]; do
	sleep 2
	if [ $((SECONDS - t1)) -gt 300 ]; then echo "    still not at zero after 300 s"; break; fi
done
say "Replicas $(replicas), $((SECONDS - t1)) s after the wait began (the burst ended $((SECONDS - burst_end)) s ago)"
kubectl get hso,scaledobject,hpa -n demo 2>/dev/null || true

cat <<TXT

The demo keeps running (cluster '$name', state in $HTTPSCALE_CLUSTER_DIR). Try:

  eval "\$(go run ./hack/cluster --name $name env)"      # kubectl + netns-exec on PATH
  kubectl get nodes -L topology.kubernetes.io/zone
  kubectl get pods -n httpscale-system -o wide            # the chart's pods on the real nodes
  kubectl get pods,endpointslices -n demo -o wide
  kubectl get hso,scaledobject,hpa -n demo
  netns-exec curl -s -H 'Host: $host' http://$proxy/     # through the interceptor Service
  kubectl logs -n httpscale-system -l app.kubernetes.io/component=interceptor
  go run ./hack/cluster --name $name status                       # processes, PIDs, logs

Stop everything with: make demo-down
TXT
