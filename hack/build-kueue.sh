#!/usr/bin/env bash
# Build (or find) Kueue's manager and the manifests the test cluster installs with it (hack/unicore_devcluster/kueue.py).
#
#   hack/build-kueue.sh          # build what is missing, print the folder as the last stdout line
#
# Binary:    kueue                  sigs.k8s.io/kueue/cmd/kueue at KUEUE_VERSION, from the Go module proxy (go install;
#                                   static: CGO_ENABLED=0, -trimpath; about 6 minutes cold on 2 cores)
# Manifests: crds/*.yaml            the module's config/components/crd/bases (the CRDs, as controller-gen wrote them)
#            webhook/manifests.yaml the module's config/components/webhook/manifests.yaml (the webhook configurations,
#                                   before kustomize names them; kueue.py renames them as the release's are)
# Cache:     ${UNICORE_CACHE:-$HOME/.cache/unicore}/kueue-<version>/
# Every output is written under a temporary name and renamed, so an interrupted build never leaves half a file.
set -euo pipefail

KUEUE_VERSION="v0.17.0"
MODULE="sigs.k8s.io/kueue"

log() { echo "[build-kueue] $*" >&2; }

BIN_DIR="${UNICORE_CACHE:-$HOME/.cache/unicore}/kueue-${KUEUE_VERSION}"
mkdir -p "$BIN_DIR"
trap 'rm -rf "$BIN_DIR"/.*.tmp.$$ "$BIN_DIR"/webhook/.*.tmp.$$' EXIT
total_start=$SECONDS

# go install of a module@version runs outside any module: no -mod flag (GOFLAGS), the machine's own Go.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=""

if [[ ! -x "$BIN_DIR/kueue" ]]; then
  log "building kueue ($MODULE/cmd/kueue@$KUEUE_VERSION)"
  start=$SECONDS
  gobin_tmp="$BIN_DIR/.gobin.tmp.$$"
  mkdir -p "$gobin_tmp"
  # the version Kueue reports (its Makefile's LD_FLAGS: pkg/version.GitVersion; the commit is not known here)
  GOBIN="$gobin_tmp" go install -trimpath \
    -ldflags "-s -w -X '$MODULE/pkg/version.GitVersion=$KUEUE_VERSION' -X '$MODULE/pkg/version.GitCommit=module-proxy'" \
    "$MODULE/cmd/kueue@$KUEUE_VERSION"
  mv -f "$gobin_tmp/kueue" "$BIN_DIR/kueue"
  log "built kueue in $((SECONDS - start)) s"
fi

if [[ ! -d "$BIN_DIR/crds" || ! -s "$BIN_DIR/webhook/manifests.yaml" ]]; then
  # the module's source (go install put it in the module cache already; this only finds it)
  src="$(go mod download -json "$MODULE@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  if [[ -z "$src" || ! -d "$src/config/components/crd/bases" ]]; then
    log "no $MODULE@$KUEUE_VERSION source in the module cache (go mod download gave Dir='$src')"
    exit 1
  fi
  if [[ ! -d "$BIN_DIR/crds" ]]; then
    log "copying the CRDs from $src/config/components/crd/bases"
    tmp="$BIN_DIR/.crds.tmp.$$"
    mkdir -p "$tmp"
    cp "$src"/config/components/crd/bases/*.yaml "$tmp/"
    chmod u+w "$tmp"/*.yaml  # the module cache's files are read-only
    mv -T "$tmp" "$BIN_DIR/crds"
  fi
  if [[ ! -s "$BIN_DIR/webhook/manifests.yaml" ]]; then
    mkdir -p "$BIN_DIR/webhook"
    cp "$src/config/components/webhook/manifests.yaml" "$BIN_DIR/webhook/.manifests.yaml.tmp.$$"
    chmod u+w "$BIN_DIR/webhook/.manifests.yaml.tmp.$$"
    mv -f "$BIN_DIR/webhook/.manifests.yaml.tmp.$$" "$BIN_DIR/webhook/manifests.yaml"
  fi
fi
echo "$KUEUE_VERSION" >"$BIN_DIR/version"

log "kueue ready in $BIN_DIR ($((SECONDS - total_start)) s)"
echo "$BIN_DIR"
