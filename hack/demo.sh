#!/usr/bin/env bash
# `make demo`: the local control plane with a real node (containerd + kubelet) where this host can run one, the Helm
# chart installed from helm/unicore with the images built here (the operator Deployment, the bundled Redis on a
# local-path volume, Pod Security "restricted" enforced in the namespace), examples/demo.yaml applied; waits until the
# tree is Ready and prints its pods (real containers on the real node), `kubectl get agenttasks`, the tree, the root's
# transcript and a turn pod's `kubectl logs`. Where the host cannot run a real node (one line says why), the same tree
# runs on the pod runner: a host redis-server and a host operator process. Idempotent: running it again reuses what
# runs (helm upgrade) and re-creates the demo task. Everything stays up afterwards (see the printed stop line).
# EXAMPLE=examples/<file>.yaml (`make demo EXAMPLE=examples/workbench.yaml`) applies that example instead of the tree,
# waits until its AgentTasks settle and prints each one's transcript with its tool calls and results.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=$REPO/.venv/bin
export UNICORE_CACHE=${UNICORE_CACHE:-$HOME/.cache/unicore}
DEMO_DIR=${UNICORE_DEMO_DIR:-$UNICORE_CACHE/demo}
NS=${UNICORE_DEMO_NAMESPACE:-unicore-demo}
EXAMPLE=${EXAMPLE:-examples/demo.yaml}
[[ -f $EXAMPLE ]] || { echo "demo: EXAMPLE=$EXAMPLE: no such file" >&2; exit 2; }
mkdir -p "$DEMO_DIR"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# ------------------------------------------------------------------------------------------------ the cluster
# A devcluster already running is reused as it is. Else a real node, where this host can run one: it needs root,
# cgroup v1, iptables, ... (unicore_devcluster.node_host.unavailable_reason says what is missing);
# UNICORE_NO_CONTAINERS=1 asks for the pod runner.
RUNNING=$("$BIN/python" -c 'from unicore_devcluster.cluster import read_state, supervisor_alive
s = read_state()
print(("real" if s.get("real_node") else "runner") if s and supervisor_alive(s) else "")')
NODE=auto  # `up` says in one line which node it runs and, without a real node, why
REASON=""
if [[ -z $RUNNING && ${UNICORE_NO_CONTAINERS:-} == 1 ]]; then
  NODE=runner
elif [[ -z $RUNNING ]]; then
  REASON=$("$BIN/python" -c 'from unicore_devcluster.node_host import unavailable_reason as r; print(r() or "")')
elif [[ $RUNNING == runner ]]; then
  say "the devcluster already running has no real node (it runs the pod runner); for a real node: make cluster-down," \
    "then make demo"
fi
if [[ $RUNNING == real || ( -z $RUNNING && $NODE == auto && -z $REASON ) ]]; then
  say "building or reusing the real node's binaries and the images (hack/build-node.sh, hack/build-images.sh)"
  hack/build-node.sh >/dev/null
  hack/build-images.sh >/dev/null
fi
say "starting the local control plane"
eval "$("$BIN/unicore-devcluster" up --detach --node "$NODE")"
export KUBECONFIG
MODE=$("$BIN/python" -c 'from unicore_devcluster.cluster import read_state as r; s = r(); print("real" if s and s.get("real_node") else "runner")')

# The traces (docs/observability.md): a real Jaeger as a host process (`unicore traces up`, its own home under
# $DEMO_DIR), on an address the turn pods reach (the node IP on the real node). UNICORE_NO_JAEGER=1: no traces.
OTEL_EXPORTER_OTLP_ENDPOINT="" UNICORE_TRACE_URL=""
if [[ ${UNICORE_NO_JAEGER:-} != 1 ]]; then
  TRACE_HOST=127.0.0.1
  if [[ $MODE == real ]]; then
    TRACE_HOST=$("$BIN/python" -c 'from unicore_devcluster.node_host import node_ip; print(node_ip() or "127.0.0.1")')
  fi
  say "starting Jaeger on $TRACE_HOST (unicore traces up; UNICORE_NO_JAEGER=1: none)"
  hack/build-jaeger.sh >/dev/null
  eval "$(UNICORE_HOME=$DEMO_DIR/home "$BIN/unicore" traces up --host "$TRACE_HOST")"
fi

print_trace() {  # the Jaeger page of AgentTask $1's trace (status.trace.url, written by the operator)
  [[ -n $UNICORE_TRACE_URL ]] || return 0
  local url=""
  for _ in $(seq 100); do
    url=$(kubectl get agenttask "$1" -n "$NS" -o jsonpath='{.status.trace.url}' 2>/dev/null || true)
    [[ -n $url ]] && break; sleep 0.2
  done
  [[ -n $url ]] || url="(none yet: kubectl get agenttask $1 -o jsonpath='{.status.trace}')"
  say "the trace of $1's tree, in Jaeger: $url"
}

# ----------------------------------------------------------------------------------------- the demo tree, either way
run_example() {  # EXAMPLE: apply it afresh, wait for its AgentTasks to settle, print their transcripts
  local tasks
  tasks=$("$BIN/python" -c 'import sys, yaml
print(" ".join(d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "AgentTask"))' "$EXAMPLE")
  say "applying $EXAMPLE (deleting what an earlier run left of it first)"
  kubectl delete -n "$NS" -f "$EXAMPLE" --ignore-not-found --wait=true --timeout=90s >/dev/null
  local pools
  pools=$("$BIN/python" -c 'import sys, yaml
print(" ".join(d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1]))
               if d and d.get("kind") == "Agent" and ((d.get("spec") or {}).get("warmPool") or {}).get("size")))' "$EXAMPLE")
  if [[ -n $pools ]]; then  # warm pools (docs/warm-pods.md): the Agents first, their pods ready, then the tasks
    "$BIN/python" -c 'import sys, yaml
yaml.safe_dump_all([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "Agent"], sys.stdout)' \
      "$EXAMPLE" | kubectl apply -n "$NS" -f - >/dev/null
    for pool in $pools; do
      say "waiting for the warm pods of $pool (kubectl get pods -l unicore.dev/warm-pool=$pool)"
      for _ in $(seq 900); do  # one of its pods says (its log) that it waits for a turn
        kubectl logs -n "$NS" -l "unicore.dev/warm-pool=$pool" --tail=20 2>/dev/null | grep -q "waits in pool" && break
        sleep 0.2
      done
    done
    kubectl get pods -n "$NS" -l unicore.dev/warm-pool -o wide
  fi
  local rooms  # shared conversations the example's AgentTasks take part in (docs/conversations.md): made first
  rooms=$("$BIN/python" -c 'import sys, yaml
print(" ".join(dict.fromkeys(c for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "AgentTask"
                             for c in (d.get("spec") or {}).get("conversations") or [])))' "$EXAMPLE")
  for room in $rooms; do
    say "kubectl agenttask conv create $room (a shared conversation, in the task API; you take part)"
    PATH=$BIN:$PATH kubectl agenttask conv delete "$room" -n "$NS" >/dev/null 2>&1 || true  # an earlier run's
    PATH=$BIN:$PATH kubectl agenttask conv create "$room" -n "$NS" --title "$room (make demo)"
  done
  kubectl apply -n "$NS" -f "$EXAMPLE" >/dev/null
  if [[ -n $rooms ]]; then
    for name in $tasks; do
      for _ in $(seq 900); do
        [[ $(kubectl get agenttask "$name" -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null) == Idle ]] && break
        sleep 0.2
      done
    done
    for room in $rooms; do
      say "kubectl agenttask conv post $room \"@writer ...\" (a person's post: the writer answers, the critic and" \
        "the writer hand it to each other by @mention)"
      PATH=$BIN:$PATH kubectl agenttask conv post "$room" -n "$NS" \
        "@writer a one-line tagline for UniCore, please."
      for _ in $(seq 900); do  # the critic's approval ends the exchange
        PATH=$BIN:$PATH kubectl agenttask conv show "$room" -n "$NS" 2>/dev/null | grep -q "Approved" && break
        sleep 0.2
      done
      say "kubectl agenttask conv show $room"
      PATH=$BIN:$PATH kubectl agenttask conv show "$room" -n "$NS"
    done
  fi
  local schedules
  schedules=$("$BIN/python" -c 'import sys, yaml
print(" ".join(d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "AgentSchedule"))' "$EXAMPLE")
  for schedule in $schedules; do  # AgentSchedules (docs/schedules.md): their first run, at the next minute or so
    say "waiting for the first run of AgentSchedule $schedule (kubectl get agentschedules)"
    kubectl get agentschedule "$schedule" -n "$NS"
    local started=""
    for _ in $(seq 900); do
      started=$(kubectl get agentschedule "$schedule" -n "$NS" -o jsonpath='{.status.lastStartedTask}' 2>/dev/null || true)
      [[ -n $started ]] && break; sleep 0.2
    done
    [[ -n $started ]] || { echo "demo: AgentSchedule $schedule started no task within 180 s" >&2; exit 1; }
    tasks="$tasks $started"
  done
  local triggers
  triggers=$("$BIN/python" -c 'import sys, yaml
print(" ".join(d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "AgentTrigger"))' "$EXAMPLE")
  for trigger in $triggers; do  # AgentTriggers (docs/triggers.md): a signed CloudEvent posted with curl, twice
    local key url body sig answer
    key=$("$BIN/python" -c 'import sys, yaml
print(next(d["stringData"][sys.argv[2]] for d in yaml.safe_load_all(open(sys.argv[1]))
           if d and d.get("kind") == "Secret" and d["metadata"]["name"] == "unicore-triggers"))' "$EXAMPLE" "$trigger")
    url="$(trigger_base)/triggers/$NS/$trigger"
    body='{"summary": "disk 91% full on db-1"}'
    sig="sha256=$(printf %s "$body" | "$BIN/python" -c 'import hashlib, hmac, sys
print(hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())' "$key")"
    say "curl -X POST $url (a CloudEvent in binary mode, signed with the trigger's key; sent twice)"
    for attempt in 1 2; do
      for _ in $(seq 150); do  # the operator's index holds the trigger a moment after it was applied
        answer=$(curl -sS -X POST "$url" -H "X-Signature-256: $sig" -H 'Content-Type: application/json' \
          -H 'ce-specversion: 1.0' -H 'ce-id: alert-1' -H 'ce-type: com.example.alert.disk' \
          -H 'ce-source: /monitoring/db-1' --data "$body" -w ' HTTP %{http_code}' 2>&1 || true)
        [[ $answer != *"HTTP 404"* && $answer != *"HTTP 000"* && -n $answer ]] && break; sleep 0.2
      done
      echo "  delivery $attempt: $answer"
    done
    local started
    started=$("$BIN/python" -c 'import json, sys; print(json.loads(sys.argv[1].rsplit(" HTTP", 1)[0])["task"])' \
      "$answer") || { echo "demo: the trigger $trigger started no task: $answer" >&2; exit 1; }
    tasks="$tasks $started"
  done
  local a2a_agents
  a2a_agents=$("$BIN/python" -c 'import sys, yaml
print(" ".join(d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1]))
               if d and d.get("kind") == "Agent" and "a2a" in (d.get("spec") or {})))' "$EXAMPLE")
  if [[ -n $a2a_agents ]]; then  # A2A agents (docs/a2a.md): a ServiceAccount's token, the a2a-sdk client
    kubectl create serviceaccount a2a-demo -n "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    kubectl apply -n "$NS" -f - >/dev/null <<'RBAC'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-demo}
rules:
  - {apiGroups: [unicore.dev], resources: [agenttasks], verbs: [create, get, patch]}
  - {apiGroups: [tasks.unicore.dev], resources: [agenttasks/messages], verbs: [create]}
  - {apiGroups: [tasks.unicore.dev], resources: [agenttasks/transcript], verbs: [get]}
RBAC
    kubectl create rolebinding a2a-demo -n "$NS" --role=a2a-demo --serviceaccount="$NS:a2a-demo" \
      --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    local token
    token=$(kubectl create token a2a-demo -n "$NS" --duration=1h)
  fi
  for agent in $a2a_agents; do
    local base
    base="$(trigger_base)/a2a/$NS/$agent"
    for _ in $(seq 150); do  # the operator's index holds the Agent a moment after it was applied
      curl -sf "$base/.well-known/agent-card.json" >/dev/null && break; sleep 0.2
    done
    say "hack/a2a-call.py $base (the a2a-sdk client: its card, then a streamed answer)"
    "$BIN/python" hack/a2a-call.py "$base" "$token" "The disk of db-1 is 91% full. What should I check first?"
    tasks="$tasks $(kubectl get agenttasks -n "$NS" -l "unicore.dev/a2a-agent=$agent" \
      -o jsonpath='{.items[*].metadata.name}')"
  done
  for name in $tasks; do
    for _ in $(seq 900); do
      phase=$(kubectl get agenttask "$name" -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)
      [[ $phase == Idle || $phase == Failed ]] && break; sleep 0.2
    done
  done
  echo
  kubectl get agenttasks -n "$NS" -o wide
  for name in $tasks; do
    echo
    say "transcript of $NS/$name with its tool calls (kubectl agenttask logs $name --tools)"
    PATH=$BIN:$PATH kubectl agenttask logs "$name" -n "$NS" --tools
    print_trace "$name"
  done
  if [[ -n $schedules ]]; then
    echo
    say "the schedules: last run, next run, active tasks; their Events (kubectl describe agentschedule)"
    kubectl get agentschedules -n "$NS" -o wide
    for schedule in $schedules; do
      kubectl get events -n "$NS" --field-selector "involvedObject.name=$schedule" \
        -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message
    done
  fi
  if [[ -n $pools ]]; then
    echo
    say "the warm pods: the one whose TASK is set ran that task's turn; the pool started another (docs/warm-pods.md)"
    kubectl get pods -n "$NS" -l unicore.dev/warm-pool -L unicore.dev/warm-pool,unicore.dev/task,unicore.dev/turn
  fi
}

trigger_base() {  # where the operator's trigger endpoint is reached from here
  if [[ -n ${TRIGGER_BASE:-} ]]; then echo "$TRIGGER_BASE"; return; fi
  local ip
  ip=$(kubectl get pods -n "$NS" -l app.kubernetes.io/component=operator -o jsonpath='{.items[0].status.podIP}')
  echo "http://$ip:8090"
}

run_tree() {  # kubectl agenttask reaches the operator's task API through the API server (APIService tasks.unicore.dev)
  if [[ $EXAMPLE != examples/demo.yaml ]]; then run_example; return; fi
  if kubectl get agenttask demo -n "$NS" >/dev/null 2>&1; then
    say "deleting the previous demo tree"
    kubectl delete agenttask demo -n "$NS" --wait=true --timeout=90s >/dev/null
    kubectl wait --for=delete agenttask --all -n "$NS" --timeout=90s >/dev/null 2>&1 || true
    kubectl wait --for=delete job -l app.kubernetes.io/managed-by=unicore-operator -n "$NS" --timeout=90s \
      >/dev/null 2>&1 || true
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
  PATH=$BIN:$PATH kubectl agenttask tree demo -n "$NS"
  echo
  say "transcript of $NS/demo (kubectl agenttask logs demo)"
  PATH=$BIN:$PATH kubectl agenttask logs demo -n "$NS"
  print_trace demo
}

# --------------------------------------------------------------------------- real node: the chart, real containers
real_demo() {
  say "importing the images into the node's containerd (unicore-devcluster load-images)"
  local image_args
  mapfile -t image_args < <("$BIN/unicore-devcluster" load-images --helm-args)
  say "installing the AgentTask CRD and namespace $NS (Pod Security \"restricted\" enforced)"
  kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/agenttasks.unicore.dev >/dev/null
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl label --overwrite namespace "$NS" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/warn=restricted pod-security.kubernetes.io/audit=restricted >/dev/null
  say "helm upgrade --install unicore helm/unicore -n $NS (operator and Redis as pods; waits until they are Ready)"
  # a workspace claim (the node's local-path provisioner): a tree's files outlive its pods, and command Jobs' outputs
  # reach the next turn (examples/gpu-job.yaml). Made here, not by the chart: local-path binds a claim only when its
  # first pod is scheduled (WaitForFirstConsumer), and `helm --wait` would wait for that forever.
  kubectl apply -n "$NS" -f - >/dev/null <<'PVC'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: unicore-workspace}
spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}
PVC
  # the traces' endpoint and page (a values file: helm's --set would read {trace_id} as a list)
  printf 'tracing:\n  otlpEndpoint: "%s"\n  traceUrl: "%s"\n' "$OTEL_EXPORTER_OTLP_ENDPOINT" "$UNICORE_TRACE_URL" \
    > "$DEMO_DIR/tracing-values.yaml"
  helm upgrade --install unicore helm/unicore --namespace "$NS" "${image_args[@]}" \
    --set agent.workspace.claimName=unicore-workspace --set triggers.enabled=true \
    -f "$DEMO_DIR/tracing-values.yaml" --wait --timeout 300s >/dev/null
  run_tree
  echo
  say "the tree's pods: real containers on the real node (kubectl get pods -o wide)"
  kubectl get pods -n "$NS" -o wide
  kubectl get pods -n "$NS" -o \
    custom-columns='POD:.metadata.name,NODE:.spec.nodeName,CONTAINER ID:.status.containerStatuses[0].containerID'
  echo
  if [[ $EXAMPLE == examples/demo.yaml ]]; then
    say "kubectl logs job/demo-t1 -n $NS (the root's first turn)"
    kubectl logs job/demo-t1 -n "$NS"
  fi
  cat <<MSG

The demo keeps running. Try it (only the kubeconfig is needed; the plugin is .venv/bin/kubectl-agenttask):
  export KUBECONFIG=$KUBECONFIG PATH=$BIN:\$PATH
  kubectl get agenttasks -n $NS
  kubectl agenttask tree demo -n $NS
  kubectl agenttask send demo -n $NS "Now compare A and B."
  kubectl agenttask logs demo -n $NS --follow
  kubectl get jobs,pods -n $NS -o wide
  kubectl logs -n $NS deploy/unicore-operator
Stop it (the real node's tear-down removes every container, mount, rule and cgroup it made):
  make cluster-down            # or only the release: helm uninstall unicore -n $NS
  UNICORE_HOME=$DEMO_DIR/home $BIN/unicore traces down   # Jaeger
MSG
}

# ------------------------------------------------------------ pod runner: host Redis, host operator, host processes
runner_demo() {
  if grep -q run_command "$EXAMPLE"; then
    say "note: the pod runner runs only a pod's turn container, no workbench: run_command answers with an error here" \
      "(a host that can run the real node runs it)"
  fi
  local redis_dir=$DEMO_DIR/redis
  local redis_sock=$redis_dir/redis.sock
  local op_ns=unicore-system
  local op_pid_file=$DEMO_DIR/operator.pid
  export REDIS_URL=unix://$redis_sock
  mkdir -p "$redis_dir"
  # a private redis-server on a unix socket (the pod runner's turn processes reach it too)
  if ! redis-cli -s "$redis_sock" ping >/dev/null 2>&1; then
    say "starting redis-server ($redis_sock)"
    redis-server --port 0 --unixsocket "$redis_sock" --unixsocketperm 700 --dir "$redis_dir" --save "" \
      --appendonly no --daemonize yes --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log"
    for _ in $(seq 100); do redis-cli -s "$redis_sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  say "installing the AgentTask CRD and the agents' RBAC in namespace $NS"
  kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/agenttasks.unicore.dev >/dev/null
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  "$BIN/python" - "$NS" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
from tests.cluster.operator_harness import agent_rbac
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": agent_rbac(sys.argv[1])}))
PY
  # the operator's task API behind the APIService v1alpha1.tasks.unicore.dev (Service unicore-operator in
  # unicore-system pointing at this host: docs/kubectl.md), with a serving certificate from the devcluster's CA
  local cert_dir=$DEMO_DIR/operator-certs
  kubectl create namespace "$op_ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  "$BIN/python" -m unicore_devcluster.operator_endpoint --namespace "$op_ns" --port "${UNICORE_HTTP_PORT:-18080}" \
    --task-api-port "${UNICORE_TASK_API_PORT:-18443}" --cert-dir "$cert_dir" >/dev/null
  # the operator (background; restarted when its pid is gone)
  if [[ -f $op_pid_file ]] && kill -0 "$(cat "$op_pid_file")" 2>/dev/null; then
    say "operator already running (pid $(cat "$op_pid_file"))"
  else
    say "starting unicore-operator (log: $DEMO_DIR/operator.log)"
    UNICORE_NAMESPACES=$NS UNICORE_HTTP_PORT=${UNICORE_HTTP_PORT:-18080} UNICORE_RESYNC_SECONDS=10 \
      UNICORE_TRIGGER_PORT=${UNICORE_TRIGGER_PORT:-18090} \
      UNICORE_TASK_API_PORT=${UNICORE_TASK_API_PORT:-18443} UNICORE_TASK_API_CERT_DIR=$cert_dir \
      OTEL_EXPORTER_OTLP_ENDPOINT=$OTEL_EXPORTER_OTLP_ENDPOINT UNICORE_TRACE_URL=$UNICORE_TRACE_URL \
      UNICORE_AGENT_EXTRA_ENV="{\"OTEL_EXPORTER_OTLP_ENDPOINT\": \"$OTEL_EXPORTER_OTLP_ENDPOINT\"}" \
      setsid "$BIN/unicore-operator" >>"$DEMO_DIR/operator.log" 2>&1 < /dev/null &
    echo $! > "$op_pid_file"
  fi
  TRIGGER_BASE=http://127.0.0.1:${UNICORE_TRIGGER_PORT:-18090} run_tree
  cat <<MSG

The demo keeps running. Try it (only the kubeconfig is needed; the plugin is .venv/bin/kubectl-agenttask):
  export KUBECONFIG=$KUBECONFIG PATH=$BIN:\$PATH
  kubectl get agenttasks -n $NS
  kubectl agenttask tree demo -n $NS
  kubectl agenttask send demo -n $NS "Now compare A and B."
  kubectl agenttask logs demo -n $NS --follow
  kubectl get jobs,pods -n $NS -o wide
Stop it:
  kill \$(cat $op_pid_file); redis-cli -s $redis_sock shutdown nosave; make cluster-down
  UNICORE_HOME=$DEMO_DIR/home $BIN/unicore traces down   # Jaeger
MSG
}

if [[ $MODE == real ]]; then
  real_demo
else
  runner_demo
fi
