#!/usr/bin/env bash
# Local-mode demo: a scripted root task spawns three children that run in parallel as separate processes, then
# answers with what they reported. Uses the embedded Redis (${UNICORE_HOME:-~/.unicore}/redis) unless REDIS_URL is set.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${VENV:-.venv}/bin"
NAME="${DEMO_NAME:-demo}"

# A previous demo tree of the same name would be continued rather than recreated: start clean.
"$BIN/python" - "$NAME" <<'PY'
import sys
from unicore.launch.embedded_redis import redis_url
from unicore.store.tasks import TaskStore, connect
store = TaskStore(connect(redis_url()))
root = sys.argv[1]
if store.exists(root):
    for _, record in reversed(store.tree(root)):
        store.delete_task(record.id)
PY

if [[ ${UNICORE_NO_JAEGER:-} != 1 ]]; then  # the tree's trace (docs/observability.md); UNICORE_NO_JAEGER=1: none
  echo "== unicore traces up (a local Jaeger: the turns export their spans to it)"
  hack/build-jaeger.sh >/dev/null
  eval "$("$BIN/unicore" traces up)"
  echo
fi

if [[ ${EXAMPLE:-} == examples/conversation.yaml ]]; then  # a writer, a critic and you in one conversation
  ROOM=writers-room SCRIPT=examples/conversation-script.yaml
  "$BIN/unicore" conv delete "$ROOM" >/dev/null 2>&1 || true  # an earlier run's
  for task in writer critic; do "$BIN/python" - "$task" <<'PY'
import sys
from unicore.launch.embedded_redis import redis_url
from unicore.store.tasks import TaskStore, connect
store = TaskStore(connect(redis_url()))
if store.exists(sys.argv[1]):
    store.delete_task(sys.argv[1])
PY
  done
  echo "== unicore conv create $ROOM"
  "$BIN/unicore" conv create "$ROOM" --title "Writers' room"
  echo
  for task in writer critic; do
    echo "== unicore run --name $task --conversation $ROOM (its first answer is posted there)"
    "$BIN/unicore" run -q --name "$task" --conversation "$ROOM" --model "scripted:$SCRIPT" --no-summary \
      "You are the $task in the conversation $ROOM. Say you are ready."
    echo
  done
  echo "== unicore conv post $ROOM \"@writer ...\" (the agents hand it to each other by @mention)"
  "$BIN/unicore" conv post -q "$ROOM" "@writer a one-line tagline for UniCore, please."
  echo
  echo "== unicore conv show $ROOM"
  "$BIN/unicore" conv show "$ROOM"
  echo
  echo "The web UI shows it live (a post box, the participants): $BIN/unicore ui --open"
  exit 0
fi

echo "== unicore run"
"$BIN/unicore" run --model scripted:examples/demo-script.yaml --name "$NAME" \
  "Research three facts about water in parallel and report them."
echo
echo "== unicore tree $NAME"
"$BIN/unicore" tree "$NAME"
echo
echo "== unicore show $NAME"
"$BIN/unicore" show "$NAME"
if [[ ${UNICORE_NO_JAEGER:-} != 1 ]]; then
  echo
  echo "== the tree's trace in Jaeger (unicore traces url $NAME; unicore traces down stops Jaeger)"
  "$BIN/unicore" traces url "$NAME"
fi
