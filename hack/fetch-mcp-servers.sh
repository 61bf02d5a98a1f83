#!/usr/bin/env bash
# Install (or find) the third-party MCP servers UniCore's tests run against (docs/mcp.md).
#
#   hack/fetch-mcp-servers.sh   # install if missing; print the install folder as the last stdout line
#
# What:   @modelcontextprotocol/server-everything from npm, pinned with its whole dependency tree in
#         hack/mcp-servers/package-lock.json (`npm ci`: exactly those versions, integrity-checked). Run it with
#         `node <folder>/node_modules/@modelcontextprotocol/server-everything/dist/index.js stdio|streamableHttp`
#         (streamableHttp listens on $PORT, path /mcp). mcp-server-time (PyPI) is a dev dependency in pyproject.toml
#         (`python -m mcp_server_time`), installed by hack/bootstrap.sh.
# Cache:  ${UNICORE_CACHE:-$HOME/.cache/unicore}/mcp-servers-<version>-<hash of the lock file>; a warm run only checks
#         the entry file. The install runs in a temporary folder next to it and is renamed into place, so an
#         interrupted install never leaves half a folder.
# Needs:  node >= 20 and npm (Debian's nodejs and npm packages are installed with apt-get when missing).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/mcp-servers"
VERSION="$(sed -n 's/.*"@modelcontextprotocol\/server-everything": "\([^"]*\)".*/\1/p' "$SRC/package.json" | head -n 1)"
ENTRY="node_modules/@modelcontextprotocol/server-everything/dist/index.js"
log() { echo "[fetch-mcp-servers] $*" >&2; }
fail() { echo "fetch-mcp-servers: $*" >&2; exit 1; }

[[ -n "$VERSION" ]] || fail "no @modelcontextprotocol/server-everything version in $SRC/package.json"
CACHE="${UNICORE_CACHE:-$HOME/.cache/unicore}"
key="$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -c1-12)"
DEST="$CACHE/mcp-servers-${VERSION}-${key}"

if [[ -f "$DEST/$ENTRY" ]]; then  # the warm path
  log "cached: $DEST"
  echo "$DEST"
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "node/npm not found; installing Debian's nodejs and npm packages"
  SUDO=""
  [[ "$(id -u)" = 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq -o DPkg::Lock::Timeout=600  # make test's other chain may be installing too
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 nodejs npm >/dev/null
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
(( major >= 20 )) || fail "node $(node --version) is too old: the MCP test servers need node >= 20"

mkdir -p "$CACHE"
tmp="$(mktemp -d "$CACHE/.mcp-servers-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$SRC/package.json" "$SRC/package-lock.json" "$tmp/"
log "npm ci @modelcontextprotocol/server-everything@$VERSION into $DEST"
if ! (cd "$tmp" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2); then
  fail "npm ci failed (see above)"
fi
[[ -f "$tmp/$ENTRY" ]] || fail "npm ci did not install $ENTRY"
rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT
echo "$DEST"
