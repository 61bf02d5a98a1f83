#!/usr/bin/env bash
# Build (or find) what the devcluster's real node runs besides containerd: kubelet, kube-proxy, CoreDNS, a small
# CRI client, the static pause binary and two image archives (pause, and a busybox image for tests), all without a
# registry. Installs the Debian packages the node needs if they are missing.
#
#   hack/build-node.sh          # build what is missing, print the bin dir as the last stdout line
#
# Binaries:  kubelet, kube-proxy    k8s.io/kubernetes at the control plane's version (wrapper module hack/k8s/kube)
#            unicore-cri            hack/k8s/kube/cri: stop/remove pod sandboxes over CRI (crictl's module,
#                                   sigs.k8s.io/cri-tools, is refused by the Go module proxy)
#            coredns                github.com/coredns/coredns at the version kubeadm of that release deploys,
#                                   with the plugins cluster DNS uses (wrapper module hack/k8s/coredns)
#            pause                  build/pause/linux/pause.c of the k8s.io/kubernetes module, gcc -static
# Images:    images/pause.tar       unicore.local/pause:<PAUSE_VERSION> (the pod sandbox image)
#            images/busybox.tar     unicore.local/busybox:<Debian's busybox-static version> (tests)
# Packages:  containernetworking-plugins (bridge, host-local, loopback in /usr/lib/cni), iptables, conntrack,
#            busybox-static (apt-get, only when one is missing). containerd and runc come with
#            hack/build-images.sh / the containerd runtime, not from here.
# Cache:     ${UNICORE_CACHE:-$HOME/.cache/unicore}/node-<k8s version>-coredns-<coredns version>/
# Every output is written under a temporary name and renamed, so an interrupted build never leaves half a file.
set -euo pipefail

KUBE_VERSION="v1.36.3"
COREDNS_VERSION="v1.14.2"   # cmd/kubeadm/app/constants CoreDNSVersion of KUBE_VERSION
PAUSE_VERSION="3.10.2"      # cmd/kubeadm/app/constants PauseVersion of KUBE_VERSION
PACKAGES=(containernetworking-plugins iptables conntrack busybox-static)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "[build-node] $*" >&2; }

BIN_DIR="${UNICORE_CACHE:-$HOME/.cache/unicore}/node-${KUBE_VERSION}-coredns-${COREDNS_VERSION}"
mkdir -p "$BIN_DIR/images"
trap 'rm -rf "$BIN_DIR"/.*.tmp.$$ "$BIN_DIR"/images/.*.tmp.$$' EXIT
total_start=$SECONDS

# ---------------------------------------------------------------- Debian packages
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    log "missing Debian packages ${missing[*]} and not root: install them with apt-get"
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q -o DPkg::Lock::Timeout=600 >&2
  apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >&2
fi

# ---------------------------------------------------------------- Go binaries
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"

minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  kube_ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  kube_ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
done

build_one() {  # build_one <module dir> <package> <output name> <ldflags> [stamp]
  local moddir="$1" pkg="$2" name="$3" flags="$4" stamp="${5:-}"
  if [[ -x "$BIN_DIR/$name" ]] && { [[ -z "$stamp" ]] || [[ "$(cat "$BIN_DIR/.$name.stamp" 2>/dev/null)" == "$stamp" ]]; }; then
    return 0
  fi
  local tmp="$BIN_DIR/.$name.tmp.$$"
  log "building $name ($pkg)"
  local start=$SECONDS
  (cd "$moddir" && go build -trimpath -ldflags "$flags" -o "$tmp" "$pkg") || { rm -f "$tmp"; return 1; }
  mv -f "$tmp" "$BIN_DIR/$name"
  [[ -z "$stamp" ]] || echo "$stamp" >"$BIN_DIR/.$name.stamp"
  log "built $name in $((SECONDS - start)) s"
}

build_one "$HERE/k8s/kube" k8s.io/kubernetes/cmd/kubelet kubelet "$kube_ldflags"
build_one "$HERE/k8s/kube" k8s.io/kubernetes/cmd/kube-proxy kube-proxy "$kube_ldflags"
build_one "$HERE/k8s/kube" ./cri unicore-cri "-s -w" "$(sha256sum "$HERE/k8s/kube/cri/main.go" | cut -c1-16)"
build_one "$HERE/k8s/coredns" . coredns \
  "-s -w -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_VERSION}-unicore"

# ---------------------------------------------------------------- pause (static) and the image archives
if [[ ! -x "$BIN_DIR/pause" ]]; then
  kube_src="$(cd "$HERE/k8s/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  log "building pause from $kube_src/build/pause/linux/pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE_VERSION}-unicore" \
    -o "$BIN_DIR/.pause.tmp.$$" "$kube_src/build/pause/linux/pause.c"
  mv -f "$BIN_DIR/.pause.tmp.$$" "$BIN_DIR/pause"
fi

oci() { python3 "$HERE/unicore_devcluster/oci_archive.py" "$@" >/dev/null; }

if [[ ! -s "$BIN_DIR/images/pause.tar" ]]; then
  log "writing images/pause.tar (unicore.local/pause:${PAUSE_VERSION})"
  oci --name "unicore.local/pause:${PAUSE_VERSION}" --out "$BIN_DIR/images/.pause.tar.tmp.$$" \
    --file "/pause=$BIN_DIR/pause" --entrypoint /pause --user 65535:65535
  mv -f "$BIN_DIR/images/.pause.tar.tmp.$$" "$BIN_DIR/images/pause.tar"
fi
echo "unicore.local/pause:${PAUSE_VERSION}" >"$BIN_DIR/images/pause.name"

busybox_version="$(dpkg-query -W -f='${Version}' busybox-static)"
busybox_version="${busybox_version#*:}"; busybox_version="${busybox_version%%-*}"
busybox_name="unicore.local/busybox:${busybox_version}"
if [[ ! -s "$BIN_DIR/images/busybox.tar" ]] || [[ "$(cat "$BIN_DIR/images/busybox.name" 2>/dev/null)" != "$busybox_name" ]]; then
  log "writing images/busybox.tar ($busybox_name, from Debian's busybox-static)"
  links=()
  while read -r applet; do
    [[ "$applet" == bin/busybox ]] || links+=(--symlink "/$applet=/bin/busybox")
  done < <(/bin/busybox --list-full)
  oci --name "$busybox_name" --out "$BIN_DIR/images/.busybox.tar.tmp.$$" \
    --file /bin/busybox=/bin/busybox "${links[@]}" --dir /tmp --dir /etc --cmd /bin/sh
  mv -f "$BIN_DIR/images/.busybox.tar.tmp.$$" "$BIN_DIR/images/busybox.tar"
fi
echo "$busybox_name" >"$BIN_DIR/images/busybox.name"

log "node binaries ready in $BIN_DIR ($((SECONDS - total_start)) s)"
echo "$BIN_DIR"
