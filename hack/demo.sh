#!/usr/bin/env bash
# `make demo`: Redis + the local control plane (GPU node, pod runner) + the operator; apply examples/demo.yaml; wait
# until the tree is Ready; print `kubectl get agenttasks` and the root's transcript. Idempotent: running it again
# reuses what is running and re-creates the demo task. Everything stays up afterwards (see the printed stop line).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=$REPO/.venv/bin
export UNICORE_CACHE=${UNICORE_CACHE:-$HOME/.cache/unicore}
DEMO_DIR=${UNICORE_DEMO_DIR:-$UNICORE_CACHE/demo}
NS=${UNICORE_DEMO_NAMESPACE:-unicore-demo}
REDIS_DIR=$DEMO_DIR/redis
REDIS_SOCK=$REDIS_DIR/redis.sock
export REDIS_URL=unix://$REDIS_SOCK
mkdir -p "$REDIS_DIR"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# 1. Redis: a private redis-server on a unix socket (turn processes of the pod runner reach it too).
if ! redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1; then
  say "starting redis-server ($REDIS_SOCK)"
  redis-server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 --dir "$REDIS_DIR" --save "" \
    --appendonly no --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log"
  for _ in $(seq 100); do redis-cli -s "$REDIS_SOCK" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

# 2. The local control plane (reused when already up). The demo's pods run on the pod runner (--node runner): they
#    reach Redis on a unix socket of this host, which real containers on the real node cannot.
say "starting the local control plane"
eval "$("$BIN/unicore-devcluster" up --detach --node runner)"
export KUBECONFIG

# 3. CRD, namespace, the agents' ServiceAccount and Role (create/get/list/watch agenttasks).
say "installing the AgentTask CRD and the agents' RBAC in namespace $NS"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/agenttasks.unicore.dev >/dev/null
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$BIN/python" - "$NS" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
from tests.cluster.operator_harness import agent_rbac
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": agent_rbac(sys.argv[1])}))
PY

# 4. The operator (background; restarted when its pid is gone).
OP_PID_FILE=$DEMO_DIR/operator.pid
if [[ -f $OP_PID_FILE ]] && kill -0 "$(cat "$OP_PID_FILE")" 2>/dev/null; then
  say "operator already running (pid $(cat "$OP_PID_FILE"))"
else
  say "starting unicore-operator (log: $DEMO_DIR/operator.log)"
  UNICORE_NAMESPACES=$NS UNICORE_HTTP_PORT=${UNICORE_HTTP_PORT:-18080} UNICORE_RESYNC_SECONDS=10 \
    setsid "$BIN/unicore-operator" >>"$DEMO_DIR/operator.log" 2>&1 < /dev/null &
  echo $! > "$OP_PID_FILE"
fi

# 5. The operator's task API behind the Service `unicore-operator` in unicore-system, so `kubectl agenttask send/logs`
#    reach it through the API server's service proxy (the API server refuses loopback endpoints: see docs/kubectl.md).
OP_NS=unicore-system
kubectl create namespace "$OP_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$BIN/python" -m unicore_devcluster.operator_endpoint --namespace "$OP_NS" --port "${UNICORE_HTTP_PORT:-18080}" >/dev/null

# 6. The demo tree (re-created from scratch on every run).
if kubectl get agenttask demo -n "$NS" >/dev/null 2>&1; then
  say "deleting the previous demo tree"
  kubectl delete agenttask demo -n "$NS" --wait=true --timeout=90s >/dev/null
  kubectl wait --for=delete agenttask --all -n "$NS" --timeout=90s >/dev/null 2>&1 || true
fi
say "applying examples/demo.yaml"
kubectl apply -n "$NS" -f examples/demo.yaml >/dev/null
# Ready is True once the root is Idle with all children settled; wait for the children to exist first.
for _ in $(seq 600); do
  [[ $(kubectl get agenttasks -n "$NS" --no-headers 2>/dev/null | wc -l) -ge 4 ]] && break; sleep 0.2
done
kubectl wait --for=condition=Ready agenttask/demo -n "$NS" --timeout=180s >/dev/null

echo
kubectl get agenttasks -n "$NS" --sort-by=.status.treePath -o wide
echo
say "kubectl agenttask tree demo -n $NS"
PATH=$BIN:$PATH kubectl agenttask tree demo -n "$NS" --operator-namespace "$OP_NS"
echo
say "transcript of $NS/demo (kubectl agenttask logs demo)"
PATH=$BIN:$PATH kubectl agenttask logs demo -n "$NS" --operator-namespace "$OP_NS"
cat <<MSG

The demo keeps running. Try it (only the kubeconfig is needed; the plugin is .venv/bin/kubectl-agenttask):
  export KUBECONFIG=$KUBECONFIG PATH=$BIN:\$PATH UNICORE_OPERATOR_NAMESPACE=$OP_NS
  kubectl get agenttasks -n $NS
  kubectl agenttask tree demo -n $NS
  kubectl agenttask send demo -n $NS "Now compare A and B."
  kubectl agenttask logs demo -n $NS --follow
  kubectl get jobs,pods -n $NS -o wide
Stop it:
  kill \$(cat $OP_PID_FILE); redis-cli -s $REDIS_SOCK shutdown nosave; make cluster-down
MSG
