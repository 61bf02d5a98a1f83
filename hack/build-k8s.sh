#!/usr/bin/env bash
# Build (or find) the Kubernetes control-plane binaries used by unicore_devcluster.
#
#   hack/build-k8s.sh            # build what is missing, print the bin dir as the last stdout line
#
# Binaries: kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm (kubectl at the servers' own
# version, so tests and the demo do not depend on whatever kubectl the machine has).
# Cache:    ${UNICORE_CACHE:-$HOME/.cache/unicore}/k8s-<version>/
# If KUBEBUILDER_ASSETS names a folder that already holds all binaries, it is used and nothing is built.
# Every binary is built to a temporary name and renamed, so an interrupted build never leaves half a binary.
set -euo pipefail

KUBE_VERSION="v1.36.3"
HELM_VERSION="v3.22.0"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "[build-k8s] $*" >&2; }

has_all() {
  local dir="$1" b
  for b in "${BINARIES[@]}"; do
    [[ -x "$dir/$b" ]] || return 1
  done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && has_all "$KUBEBUILDER_ASSETS"; then
  log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

BIN_DIR="${UNICORE_CACHE:-$HOME/.cache/unicore}/k8s-${KUBE_VERSION}"
mkdir -p "$BIN_DIR"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"

# version ldflags (what `kube-apiserver --version` and /version report)
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
done

build_one() {  # build_one <module dir> <package> <output name> [ldflags]
  local moddir="$1" pkg="$2" name="$3" flags="${4:--s -w}"
  if [[ -x "$BIN_DIR/$name" ]]; then
    return 0
  fi
  local tmp="$BIN_DIR/.$name.tmp.$$"
  log "building $name ($pkg)"
  local start=$SECONDS
  (cd "$moddir" && go build -trimpath -ldflags "$flags" -o "$tmp" "$pkg") || { rm -f "$tmp"; return 1; }
  mv -f "$tmp" "$BIN_DIR/$name"
  log "built $name in $((SECONDS - start)) s"
}

trap 'rm -f "$BIN_DIR"/.*.tmp.$$' EXIT

total_start=$SECONDS
build_one "$HERE/k8s/etcd" . etcd
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build_one "$HERE/k8s/kube" "k8s.io/kubernetes/cmd/$cmd" "$cmd" "$ldflags"
done

if [[ ! -x "$BIN_DIR/helm" ]]; then
  log "installing helm $HELM_VERSION"
  gobin_tmp="$(mktemp -d "$BIN_DIR/.helm.XXXXXX")"
  GOFLAGS="" GOBIN="$gobin_tmp" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" \
    || { rm -rf "$gobin_tmp"; exit 1; }
  mv -f "$gobin_tmp/helm" "$BIN_DIR/helm"
  rm -rf "$gobin_tmp"
fi

log "binaries ready in $BIN_DIR ($((SECONDS - total_start)) s)"
echo "$BIN_DIR"
