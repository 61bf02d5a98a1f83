#!/usr/bin/env bash
# Build (or find) unicore-exec, the workbench container's exec server (exec-server/, Go standard library only).
#
#   hack/build-exec-server.sh    # build it if missing, print the binary's path as the last stdout line
#
# Static and portable: CGO_ENABLED=0 (no libc: it runs in any workbench image, busybox and distroless included),
# -trimpath, -ldflags "-s -w", GOAMD64=v1 (the Go default, whatever the caller's environment says), GOTOOLCHAIN=local.
# Cache:  ${UNICORE_CACHE:-$HOME/.cache/unicore}/exec-server-<hash16>/unicore-exec, <hash16> the first 16 hex digits
#         of the sha256 over exec-server/'s sources (*.go, go.mod, go.sum: paths and contents) and this script; a
#         change to either is a new folder. Built under a temporary name and renamed, so an interrupted build never
#         leaves half a binary.
# The agent image gets the same binary: hack/build-images.sh calls this script; Dockerfile.agent builds it in a
# golang stage with the same flags.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../exec-server" && pwd)"
log() { echo "[build-exec-server] $*" >&2; }

hash="$(
  cd "$SRC"
  {
    find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum <"$HERE/build-exec-server.sh"
  } | sha256sum | cut -c1-16
)"
OUT_DIR="${UNICORE_CACHE:-$HOME/.cache/unicore}/exec-server-$hash"
BIN="$OUT_DIR/unicore-exec"
if [[ ! -x "$BIN" ]]; then
  mkdir -p "$OUT_DIR"
  tmp="$OUT_DIR/.unicore-exec.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  log "building $BIN"
  start=$SECONDS
  (cd "$SRC" && GOTOOLCHAIN=local CGO_ENABLED=0 GOAMD64=v1 GOFLAGS="${GOFLAGS:-} -mod=mod" \
    go build -trimpath -ldflags "-s -w" -o "$tmp" .)
  mv -f "$tmp" "$BIN"
  log "built in $((SECONDS - start)) s"
fi
echo "$BIN"
