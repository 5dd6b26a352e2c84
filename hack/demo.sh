#!/usr/bin/env bash
# make demo: the whole system on a local control plane inside a network namespace, with a sample app.
# Leaves everything running; `make demo-down` stops it. Needs root (it creates a network namespace).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

name=${HTTPSCALE_DEMO_CLUSTER:-demo}
host=demo.httpscale.local
t0=$SECONDS
say() { printf '\n\033[1m==> [%4ds] %s\033[0m\n' "$((SECONDS - t0))" "$*"; }
cluster() { go run ./hack/cluster --name "$name" "$@"; }

say "Starting the local control plane '$name' (the first run builds Kubernetes, kwok and KEDA from the Go module proxy: 15+ minutes)"
eval "$(cluster up)"

say "Starting httpscale: scaler, one interceptor per zone, operator (chart installed with Helm; each binary runs with its chart ServiceAccount's token)"
cluster start-httpscale

ia=198.19.1.1 # interceptor in zone-a (see docs/local-cluster.md for addresses)
say "Applying the sample app (Deployment at 0 replicas, Service) and its HTTPScaledObject for host $host"
kubectl apply -f - <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: sampleapp, namespace: demo}
spec:
  replicas: 0
  selector: {matchLabels: {app: sampleapp}}
  template:
    metadata: {labels: {app: sampleapp}}
    spec:
      containers:
      - name: app
        image: httpscale.dev/sampleapp:local
        ports: [{name: http, containerPort: 8000}]
---
apiVersion: v1
kind: Service
metadata: {name: sampleapp, namespace: demo}
spec:
  selector: {app: sampleapp}
  ports: [{name: http, port: 80, targetPort: 8000}]
---
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: sampleapp, namespace: demo}
spec:
  hosts: ["$host"]
  scaleTargetRef: {kind: Deployment, apiVersion: apps/v1, name: sampleapp, service: sampleapp, port: 80}
  replicas: {min: 0, max: 4}
  scaledownPeriod: 30
  scalingMetric: {concurrency: {targetValue: 10}}
YAML

say "Replicas now: $(kubectl get deploy sampleapp -n demo -o jsonpath='{.spec.replicas}')"
say "Sending one request while the app is at zero, through the zone-a interceptor ($ia:8080)"
replicas() { kubectl get deploy sampleapp -n demo -o jsonpath='{.spec.replicas}/{.status.readyReplicas}'; }
code=$(netns-exec curl -sS -m 90 -o /tmp/httpscale-demo-answer.$$ -H "Host: $host" \
	-w '%{http_code} %{time_total}' "http://$ia:8080/hello" || true)
if [ "${code%% *}" = 200 ]; then
	echo "    answered HTTP 200 after ${code#* }s (held while the app woke up): $(cat /tmp/httpscale-demo-answer.$$)"
	rm -f /tmp/httpscale-demo-answer.$$
	say "Replicas (desired/ready) after the request: $(replicas)"

	say "Load burst: 100 concurrent requests, each held 500 ms by the app, for about 20 s"
	cluster load --url "http://$ia:8080/burst?sleep=500ms" --host "$host" -c 100 -n 4000 &
	load=$!
	while kill -0 "$load" 2>/dev/null; do
		echo "    replicas $(replicas)   hpa: $(kubectl get hpa -n demo -o jsonpath='{range .items[*]}{.status.currentReplicas}->{.status.desiredReplicas}{end}' 2>/dev/null)"
		sleep 2
	done
	wait "$load" || true
	say "Burst done; replicas $(replicas). Waiting for the return to zero (30 s without traffic)"
	t1=$SECONDS
	until [ "$(kubectl get deploy sampleapp -n demo -o jsonpath='{.spec.replicas}')" = 0 ]; do
		sleep 2
		if [ $((SECONDS - t1)) -gt 300 ]; then echo "    still not at zero after 300 s"; break; fi
	done
	say "Replicas $(replicas), $((SECONDS - t1)) s after the burst ended"
else
	echo "    no answer (${code:-none}): the interceptor in bin/ does not proxy yet; see $HTTPSCALE_CLUSTER_DIR/logs"
fi
kubectl get httpscaledobject,scaledobject,hpa -n demo 2>/dev/null || true

cat <<TXT

The demo keeps running (cluster '$name', state in $HTTPSCALE_CLUSTER_DIR). Try:

  eval "\$(go run ./hack/cluster --name $name env)"      # kubectl + netns-exec on PATH
  kubectl get nodes -L topology.kubernetes.io/zone
  kubectl get pods,endpointslices -n demo -o wide
  kubectl get httpscaledobject,scaledobject,hpa -n demo
  netns-exec curl -s -H 'Host: $host' http://198.19.1.1:8080/    # interceptor, zone-a
  netns-exec curl -s -H 'Host: $host' http://198.19.1.2:8080/    # interceptor, zone-b
  go run ./hack/cluster --name $name status                       # processes, PIDs, logs
  ls $HTTPSCALE_CLUSTER_DIR/logs

Stop everything with: make demo-down
TXT
