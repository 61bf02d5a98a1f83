#!/usr/bin/env bash
# Build (or find) Jaeger v2's one binary, `jaeger`: the trace store and query API of `unicore traces` and of the tests
# (client/unicore_client/traces/jaeger.py runs it).
#
#   hack/build-jaeger.sh         # build it if missing, print the folder as the last stdout line
#
# Binary:  jaeger   github.com/jaegertracing/jaeger/cmd/jaeger at JAEGER_VERSION, built as a Go tool of the module in
#                   hack/jaeger/ (go.mod, go.sum). `go install ...@v1.76.0` refuses the module (its go.mod has
#                   replace directives), so hack/jaeger/ pins it instead: `go mod init unicore.dev/jaeger-tool`,
#                   `go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0`, the replace of
#                   github.com/Shopify/sarama => v1.33.0 that Jaeger's own go.mod has, `go mod tidy`.
#                   Static and portable: CGO_ENABLED=0, -trimpath, -ldflags "-s -w", GOAMD64=v1, GOTOOLCHAIN=local;
#                   about 4-5 minutes cold on 2 cores.
#                   Its built-in UI is the module's placeholder page (the Jaeger UI's assets are not in the module):
#                   the runner serves its own viewer with `extensions.jaeger_query.ui.assets_path`.
# Cache:   ${UNICORE_CACHE:-$HOME/.cache/unicore}/jaeger-<version>-<hash12>/jaeger, <hash12> the first 12 hex digits of
#          the sha256 over hack/jaeger/go.mod and go.sum: a change to the pinned modules is a new folder.
# Built under a temporary name and renamed, so an interrupted build never leaves half a binary.
set -euo pipefail

JAEGER_VERSION="v1.76.0"
MODULE="github.com/jaegertracing/jaeger"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/jaeger"
log() { echo "[build-jaeger] $*" >&2; }

hash="$(cat "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -c1-12)"
OUT_DIR="${UNICORE_CACHE:-$HOME/.cache/unicore}/jaeger-${JAEGER_VERSION}-${hash}"
BIN="$OUT_DIR/jaeger"
total_start=$SECONDS

if [[ ! -x "$BIN" ]]; then
  command -v go >/dev/null || { log "go is not on PATH (Jaeger is built from its Go module)"; exit 1; }
  mkdir -p "$OUT_DIR"
  tmp="$OUT_DIR/.jaeger.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  log "building $MODULE/cmd/jaeger@$JAEGER_VERSION into $OUT_DIR"
  start=$SECONDS
  # GOFLAGS="": go.sum is complete, so the default -mod=readonly holds; no VCS stamp (hack/jaeger/ is inside this
  # repository, whose state is not Jaeger's). The version Jaeger reports: its Makefile's internal/version variables.
  (cd "$SRC" && GOTOOLCHAIN=local CGO_ENABLED=0 GOAMD64=v1 GOFLAGS="" \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X '$MODULE/internal/version.latestVersion=$JAEGER_VERSION' -X '$MODULE/internal/version.commitSHA=module-proxy'" \
      -o "$tmp" "$MODULE/cmd/jaeger")
  mv -f "$tmp" "$BIN"
  log "built jaeger in $((SECONDS - start)) s"
fi
echo "$JAEGER_VERSION" >"$OUT_DIR/.version.tmp.$$" && mv -f "$OUT_DIR/.version.tmp.$$" "$OUT_DIR/version"

log "jaeger ready in $OUT_DIR ($((SECONDS - total_start)) s)"
echo "$OUT_DIR"
