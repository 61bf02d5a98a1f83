#!/usr/bin/env bash
# Build the project's container images without Docker and without any registry, cached by content hash.
#
#   hack/build-images.sh         # build what changed, print the images folder as the last stdout line
#
# Images (each saved as a docker-archive tar that `ctr -n k8s.io images import` loads):
#   python:3.11.11-slim-bookworm   the Dockerfiles' base, made here: `debootstrap --variant=minbase bookworm`, then
#                                  hack/images/base-setup.sh (Debian's python3.11 as `python`/`pip`, the host's CA
#                                  bundle so downloads work behind a TLS-inspecting proxy), committed with buildah
#   unicore-agent:<appVersion>     Dockerfile.agent (`buildah bud --pull-never`), its golang stage `exec-server`
#                                  replaced by a one-file image of the binary hack/build-exec-server.sh makes on the
#                                  host (localhost/unicore-exec-server:<binary's hash>): there is no golang image here
#   unicore-operator:<appVersion>  Dockerfile.operator, unchanged
#   unicore-redis:7.0-bookworm     hack/images/Containerfile.redis (Debian's redis-server, uid 999)
#   unicore-mcp-time:<version>     hack/images/Containerfile.mcp-time (mcp-server-time behind mcp-proxy, from PyPI)
# Cache:   ${UNICORE_CACHE:-$HOME/.cache/unicore}/images/  <name>-<input hash>.tar, images.json (what was built),
#          .buildah/ (buildah's own storage; never /var/lib/containers), logs/
# Inputs:  hack/unicore_devcluster/image_inputs.py says what each hash covers. An image is rebuilt only when its
#          input hash has no archive yet; archives are written under a temporary name and renamed, so an
#          interrupted build never leaves half an archive. Of each image's archives the newest 3 are kept.
# Needs:   root and apt-get (installs buildah, debootstrap, containerd, runc if missing); network to the Debian
#          mirror (UNICORE_DEBIAN_MIRROR) and PyPI. No Docker, no registry.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
log() { echo "[build-images] $*" >&2; }
fail() { echo "build-images: $*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || fail "needs root (debootstrap, buildah and containerd run as root here); run it as root"
command -v apt-get >/dev/null 2>&1 || fail "needs apt-get to install buildah, debootstrap, containerd and runc (Debian/Ubuntu)"

# ------------------------------------------------------------------------------------------- host packages
declare -A TOOL_PACKAGE=([buildah]=buildah [debootstrap]=debootstrap [containerd]=containerd [ctr]=containerd
  [runc]=runc [python3]=python3 [git]=git)
missing=()
for tool in "${!TOOL_PACKAGE[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${TOOL_PACKAGE[$tool]}")
done
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing with apt: ${missing[*]}"
  start=$SECONDS
  apt_opts=(-q -o DPkg::Lock::Timeout=600)
  apt-get "${apt_opts[@]}" update >&2 || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >&2 \
    || fail "apt-get install ${missing[*]} failed"
  log "installed in $((SECONDS - start)) s"
fi

# ----------------------------------------------------------------------------------- cache, buildah storage
CACHE="${UNICORE_CACHE:-$HOME/.cache/unicore}"
IMAGES="$CACHE/images"
MIRROR="${UNICORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEEP_ARCHIVES=3  # per image: the current one and two earlier ones
mkdir -p "$IMAGES/logs"
IMAGES="$(cd "$IMAGES" && pwd)"

exec 9>"$IMAGES/.lock"
flock 9 || fail "cannot lock $IMAGES/.lock"

driver="${UNICORE_BUILDAH_DRIVER:-overlay}"
[[ "$(stat -f -c %T "$IMAGES")" == overlayfs ]] && driver=vfs  # overlay on overlay does not mount
BUILDAH_DIR="$IMAGES/.buildah"
RUNROOT="/run/unicore-buildah/$(printf '%s' "$IMAGES" | sha256sum | cut -c1-12)"  # locks and mount state: tmpfs
mkdir -p "$BUILDAH_DIR/$driver" "$RUNROOT"
cat >"$BUILDAH_DIR/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$BUILDAH_DIR/$driver"
runroot = "$RUNROOT"
EOF
cat >"$BUILDAH_DIR/registries.conf" <<'EOF'
# No registry is ever contacted (--pull-never); short names resolve to docker.io as Docker's do.
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
export CONTAINERS_STORAGE_CONF="$BUILDAH_DIR/storage.conf" CONTAINERS_REGISTRIES_CONF="$BUILDAH_DIR/registries.conf"
export BUILDAH_ISOLATION=chroot

# leftovers of an interrupted run (we hold the lock, so nothing else uses this storage now)
buildah rm --all >/dev/null 2>&1 || true
rm -f "$IMAGES"/.*.tmp.* "$IMAGES"/.images.json.* "$IMAGES"/.plan.*.json

WORK=()   # working containers of this run
cleanup() {
  local c
  for c in "${WORK[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  rm -f "$IMAGES"/.*.tmp.$$ "$IMAGES/.plan.$$.json"
}
trap cleanup EXIT

PLAN="$IMAGES/.plan.$$.json"  # what this run builds, by the hashes of the sources as they are now
eval "$(python3 "$HERE/unicore_devcluster/image_inputs.py" plan --root "$ROOT" --mirror "$MIRROR" --save "$PLAN")"

save_archive() { # <image in storage> <archive name> <name recorded in the archive> <glob of older archives>
  local tmp="$IMAGES/.$2.tmp.$$"
  buildah push --quiet "$1" "docker-archive:$tmp:$3" >/dev/null
  mv -f "$tmp" "$IMAGES/$2"
  log "saved $2 ($(du -m "$IMAGES/$2" | cut -f1) MB)"
  # older archives of this image: the newest ones stay a while (someone may be importing one), the rest go
  # shellcheck disable=SC2012,SC2086
  ls -t "$IMAGES"/$4 2>/dev/null | tail -n +$((KEEP_ARCHIVES + 1)) | while read -r old; do
    log "removing old $(basename "$old")"
    rm -f "$old"
  done
}

stored_inputs() { # the input hash label of an image in buildah's storage, empty if absent
  buildah inspect --type image --format '{{index .OCIv1.Config.Labels "dev.unicore.inputs"}}' "$1" 2>/dev/null || true
}

# ------------------------------------------------------------------------------------------------- the base
build_base() {
  local start=$SECONDS ctr mnt
  log "base $BASE_REF: debootstrap --variant=minbase bookworm ($MIRROR), log: $IMAGES/logs/base.log"
  ctr="$(buildah from --quiet scratch)"
  WORK+=("$ctr")
  mnt="$(buildah mount "$ctr")"
  debootstrap --variant=minbase bookworm "$mnt" "$MIRROR" >"$IMAGES/logs/base.log" 2>&1 \
    || { tail -n 20 "$IMAGES/logs/base.log" >&2; fail "debootstrap failed (log: $IMAGES/logs/base.log)"; }
  rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/*
  buildah umount "$ctr" >/dev/null
  log "debootstrap done ($((SECONDS - start)) s); installing Python"
  buildah copy --quiet "$ctr" "$ROOT/hack/images/base-setup.sh" /tmp/base-setup.sh >/dev/null
  buildah run --isolation chroot --network host --env "DEBIAN_MIRROR=$MIRROR" "$ctr" -- sh /tmp/base-setup.sh \
    >>"$IMAGES/logs/base.log" 2>&1 \
    || { tail -n 20 "$IMAGES/logs/base.log" >&2; fail "base-setup.sh failed (log: $IMAGES/logs/base.log)"; }
  buildah run --isolation chroot "$ctr" -- rm -f /tmp/base-setup.sh
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then  # the host's CAs, so pip reaches PyPI from the builds
    buildah copy --quiet "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
  fi
  buildah config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["python3"]' --label "dev.unicore.inputs=$BASE_INPUTS" \
    --label "dev.unicore.recipe=debootstrap --variant=minbase bookworm + hack/images/base-setup.sh" "$ctr"
  buildah commit --quiet --rm "$ctr" "$BASE_QREF" >/dev/null
  WORK=()
  save_archive "$BASE_QREF" "$BASE_ARCHIVE" "$BASE_REF" "$BASE_ARCHIVE_GLOB"
  log "base built in $((SECONDS - start)) s"
}

ensure_base_stored() { # the project builds need the base in buildah's storage, at this input hash
  [[ "$(stored_inputs "$BASE_QREF")" == "$BASE_INPUTS" ]] && return 0
  log "loading the base from $BASE_ARCHIVE into buildah's storage"
  buildah pull --quiet "docker-archive:$IMAGES/$BASE_ARCHIVE" >/dev/null
  [[ "$(stored_inputs "$BASE_QREF")" == "$BASE_INPUTS" ]] || fail "$BASE_ARCHIVE did not load as $BASE_QREF"
}

# --------------------------------------------------------------------- the agent's host-built exec server stage
exec_server_image() { # builds unicore-exec on the host, stores it as /unicore-exec of a scratch image, prints its ref
  local bin ref ctr
  bin="$("$HERE/build-exec-server.sh" | tail -n 1)"
  ref="localhost/unicore-exec-server:$(sha256sum "$bin" | cut -c1-16)"
  if ! buildah inspect --type image "$ref" >/dev/null 2>&1; then
    ctr="$(buildah from --quiet scratch)"
    WORK+=("$ctr")
    buildah copy --quiet --chmod 0755 "$ctr" "$bin" /unicore-exec >/dev/null
    buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
    WORK=()
  fi
  echo "$ref"
}

# ------------------------------------------------------------------------------------- images FROM the base
build_from_base() { # <key> <containerfile> <context> <ref> <qualified ref> <inputs> <archive> <archive glob>
  local key="$1" file="$2" context="$3" ref="$4" qref="$5" inputs="$6" archive="$7" glob="$8" start=$SECONDS
  ensure_base_stored
  log "$key $ref: buildah bud -f ${file#"$ROOT"/} (log: $IMAGES/logs/$key.log)"
  # no --layers: it would reuse an empty bind mount (RUN --mount=from=builder) between the two Dockerfiles
  buildah bud --pull-never --isolation chroot --network host --layers=false -f "$file" -t "$qref" \
    --label "dev.unicore.inputs=$inputs" "$context" >"$IMAGES/logs/$key.log" 2>&1 \
    || { tail -n 30 "$IMAGES/logs/$key.log" >&2; fail "building $ref failed (log: $IMAGES/logs/$key.log)"; }
  save_archive "$qref" "$archive" "$ref" "$glob"
  buildah rmi "$qref" >/dev/null  # the archive is the cache; keep only the base in storage
  log "$key built in $((SECONDS - start)) s"
}

total=$SECONDS
if [[ -f "$IMAGES/$BASE_ARCHIVE" ]]; then log "base $BASE_REF: cached ($BASE_ARCHIVE)"; else build_base; fi
for key in agent operator redis mcptime; do
  ref_var="${key^^}_REF" qref_var="${key^^}_QREF" inputs_var="${key^^}_INPUTS"
  archive_var="${key^^}_ARCHIVE" glob_var="${key^^}_ARCHIVE_GLOB"
  if [[ -f "$IMAGES/${!archive_var}" ]]; then
    log "$key ${!ref_var}: cached (${!archive_var})"
    continue
  fi
  if [[ "$key" == redis || "$key" == mcptime ]]; then
    recipe="$ROOT/hack/images/Containerfile.redis"
    [[ "$key" == mcptime ]] && recipe="$ROOT/hack/images/Containerfile.mcp-time"
    build_from_base "$key" "$recipe" "$ROOT/hack/images" "${!ref_var}" \
      "${!qref_var}" "${!inputs_var}" "${!archive_var}" "${!glob_var}"
  else
    recipe="$ROOT/Dockerfile.$key"
    if [[ "$key" == agent ]]; then  # Dockerfile.agent with its exec-server stage made on the host
      recipe="$IMAGES/.Dockerfile.agent.tmp.$$"
      exec_server="$(exec_server_image)"
      python3 "$HERE/unicore_devcluster/image_inputs.py" dockerfile "$ROOT/Dockerfile.agent" \
        --stage "exec-server=$exec_server" >"$recipe"
    fi
    build_from_base "$key" "$recipe" "$ROOT" "${!ref_var}" "${!qref_var}" \
      "${!inputs_var}" "${!archive_var}" "${!glob_var}"
    if [[ "$key" == agent ]]; then  # keep only the base in storage: the stage's image is remade in a second
      buildah rm --all >/dev/null 2>&1 || true  # buildah bud leaves a container of an image-only stage
      buildah rmi "$exec_server" >/dev/null
    fi
  fi
done
buildah rmi --prune >/dev/null 2>&1 || true  # stage images the builds left
python3 "$HERE/unicore_devcluster/image_inputs.py" manifest "$IMAGES" --plan "$PLAN" --root "$ROOT" --mirror "$MIRROR" \
  >/dev/null
log "images ready in $IMAGES ($((SECONDS - total)) s)"
echo "$IMAGES"
