#!/usr/bin/env bash
# Creates .venv, installs the four distributions (core, operator, client, devcluster; editable) with the dev tools of
# requirements-dev.txt, and makes sure a redis-server exists (and bwrap, chromium).
# Idempotent: a second run only checks. Used by `make test`, `make demo`, `make demo-local`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.unicore-installed
inputs=(core/pyproject.toml operator/pyproject.toml client/pyproject.toml hack/pyproject.toml requirements-dev.txt)
stale=0
for input in "${inputs[@]}"; do [ "$input" -nt "$stamp" ] && stale=1; done
if [ ! -f "$stamp" ] || [ "$stale" = 1 ]; then
  .venv/bin/pip install --quiet --upgrade pip
  # a venv made before the split holds the one-wheel `unicore` with every entry point; the editable installs replace it
  .venv/bin/pip install --quiet -e ./core -e ./operator -e ./client -e ./hack -r requirements-dev.txt
  touch "$stamp"
fi
# The four source folders go on sys.path directly, so packages and modules added later need no reinstall.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$PWD/core" "$PWD/operator" "$PWD/client" "$PWD/hack" > "$site/unicore-src.pth"
if ! command -v redis-server >/dev/null 2>&1; then
  echo "bootstrap: redis-server not found; installing Debian's package" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  # Debian's package starts a system service; UniCore starts its own servers.
  ($SUDO service redis-server stop || true) >/dev/null 2>&1
fi
# run_command's local sandbox (core/unicore/commands/local_runner.py) is Debian's bubblewrap.
if ! command -v bwrap >/dev/null 2>&1; then
  echo "bootstrap: bwrap not found; installing Debian's bubblewrap (the sandbox of run_command in local mode)" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap >/dev/null
fi
# tests/ui drive Debian's chromium with Playwright (never `playwright install`: no downloaded browsers).
if ! [ -x /usr/bin/chromium ]; then
  echo "bootstrap: chromium not found; installing Debian's package (for tests/ui)" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
