#!/usr/bin/env bash
# Build (or find) llama.cpp's `llama-server`, the real model server of the tests and `make model-up`.
#
#   hack/build-model-server.sh   # build it if missing, print the binary's path as the last stdout line
#
# Source:  the llama-cpp-python sdist on PyPI (`pip download --no-binary :all:`, version and sha256 pinned below),
#          which vendors the whole llama.cpp tree under vendor/llama.cpp; only that tree is built, with cmake.
# Build:   static (no shared libs to carry along), Release, target llama-server only, `-j2`; nothing is downloaded
#          at build time (no prebuilt web UI, no UI build, no OpenSSL/CURL). About 15 minutes cold on 2 cores.
#          Portable, not -march=native: machines of one kind differ in CPU, and a native build on a CPU that advertises
#          AMX (whose tile instructions may still fault there) crashed with SIGSEGV. On x86-64 it targets x86-64-v3
#          (AVX2, FMA, F16C, BMI2), with AVX-512 and AMX off, so no code path needs more than every such CPU has;
#          elsewhere (arm64) ggml's generic build. The CPU's flags are not part of the cache key.
# Check:   before it is cached, the built binary is started on the 0.5B GGUF (hack/fetch-model.py) and asked for one
#          short completion (hack/check-model-server.py); a binary that cannot run here is never cached or used.
# Cache:   ${UNICORE_CACHE:-$HOME/.cache/unicore}/llama-server-<version>-<hash>/llama-server, where <hash> covers the
#          sdist's sha256, the cmake flags below and the CPU's flags; a warm run only checks that file. The build runs
#          in a temporary folder next to it and the finished folder is renamed into place, so an interrupted build
#          never leaves half a binary. The sdist is kept in downloads/ (a failed build does not download it again);
#          the build log is logs/llama-server.log.
# Needs:   cmake, a C++17 compiler and make (installed with apt-get when missing and run as root).
set -euo pipefail

VERSION="0.3.36"  # llama-cpp-python
SDIST="llama_cpp_python-${VERSION}.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
)
if [[ "$(uname -m)" == x86_64 ]]; then
  CMAKE_FLAGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
TARGET="llama-server"
JOBS="${UNICORE_BUILD_JOBS:-2}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
log() { echo "[build-model-server] $*" >&2; }
fail() { echo "build-model-server: $*" >&2; exit 1; }

CACHE="${UNICORE_CACHE:-$HOME/.cache/unicore}"
key="$(printf '%s\n' "$SDIST_SHA256" "${CMAKE_FLAGS[@]}" "$TARGET" "$(uname -m)" | sha256sum | cut -c1-12)"
DEST="$CACHE/llama-server-${VERSION}-${key}"

if [[ -x "$DEST/$TARGET" ]]; then  # the warm path: nothing else to do
  log "cached: $DEST/$TARGET"
  echo "$DEST/$TARGET"
  exit 0
fi

mkdir -p "$CACHE/downloads" "$CACHE/logs"
exec 9>"$CACHE/.llama-server.lock"
flock 9 || fail "cannot lock $CACHE/.llama-server.lock"
if [[ -x "$DEST/$TARGET" ]]; then  # built by whoever held the lock before us
  log "cached: $DEST/$TARGET"
  echo "$DEST/$TARGET"
  exit 0
fi

# ------------------------------------------------------------------------------------------- host packages
declare -A TOOL_PACKAGE=([cmake]=cmake [c++]=g++ [make]=make)
missing=()
for tool in "${!TOOL_PACKAGE[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${TOOL_PACKAGE[$tool]}")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 \
    || fail "needs ${missing[*]} (install them, or run this as root on Debian/Ubuntu to have them installed)"
  log "installing with apt: ${missing[*]}"
  apt_opts=(-q -o DPkg::Lock::Timeout=600)
  apt-get "${apt_opts[@]}" update >&2 || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >&2 \
    || fail "apt-get install ${missing[*]} failed"
fi

# ------------------------------------------------------------------------------------------------ the sdist
sdist_path="$CACHE/downloads/$SDIST"
if [[ ! -f "$sdist_path" ]] || [[ "$(sha256sum "$sdist_path" | cut -d' ' -f1)" != "$SDIST_SHA256" ]]; then
  rm -f "$sdist_path"
  python=python3
  [[ -x "$ROOT/.venv/bin/python" ]] && python="$ROOT/.venv/bin/python"
  dl="$(mktemp -d "$CACHE/downloads/.sdist.XXXXXX")"
  req="$dl/requirements.txt"
  echo "llama-cpp-python==${VERSION} --hash=sha256:${SDIST_SHA256}" >"$req"
  log "downloading the llama-cpp-python $VERSION sdist from PyPI"
  "$python" -m pip download --quiet --no-binary :all: --no-deps --require-hashes -r "$req" -d "$dl" >&2 \
    || { rm -rf "$dl"; fail "pip download llama-cpp-python==$VERSION failed"; }
  [[ "$(sha256sum "$dl/$SDIST" | cut -d' ' -f1)" == "$SDIST_SHA256" ]] \
    || { rm -rf "$dl"; fail "$SDIST does not have the pinned sha256 $SDIST_SHA256"; }
  mv -f "$dl/$SDIST" "$sdist_path"
  rm -rf "$dl"
fi

# ------------------------------------------------------------------------------------------------ the build
WORK="$(mktemp -d "$CACHE/.llama-server-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
BUILD_LOG="$CACHE/logs/llama-server.log"
start=$SECONDS
log "building $TARGET from llama-cpp-python $VERSION's vendor/llama.cpp (about 15 min on 2 cores; log: $BUILD_LOG)"
tar -xzf "$sdist_path" -C "$WORK"
src="$WORK/llama_cpp_python-${VERSION}/vendor/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || fail "$SDIST has no vendor/llama.cpp/CMakeLists.txt"
{
  cmake -S "$src" -B "$WORK/build" "${CMAKE_FLAGS[@]}" \
    && nice -n 5 cmake --build "$WORK/build" --config Release --target "$TARGET" --parallel "$JOBS"
} >"$BUILD_LOG" 2>&1 || { tail -n 30 "$BUILD_LOG" >&2; fail "building $TARGET failed (log: $BUILD_LOG)"; }

built="$WORK/build/bin/$TARGET"
[[ -x "$built" ]] || fail "the build made no $built (log: $BUILD_LOG)"
"$built" --version >"$WORK/version.txt" 2>&1 || { cat "$WORK/version.txt" >&2; fail "$built --version failed"; }
python=python3
[[ -x "$ROOT/.venv/bin/python" ]] && python="$ROOT/.venv/bin/python"
gguf="$("$python" "$HERE/fetch-model.py" | tail -n 1)" || fail "fetching the model for the build check failed"
log "checking the built $TARGET: start it on $(basename "$gguf") and ask for one short completion"
"$python" "$HERE/check-model-server.py" "$built" "$gguf" \
  || fail "the built $TARGET does not run on this machine; not cached (log: $BUILD_LOG)"
stage="$WORK/out"
mkdir -p "$stage"
cp "$built" "$stage/$TARGET"
strip "$stage/$TARGET" 2>/dev/null || true
{
  echo "llama-cpp-python $VERSION ($SDIST sha256 $SDIST_SHA256), vendor/llama.cpp"
  echo "cmake ${CMAKE_FLAGS[*]}; target $TARGET; built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
  cat "$WORK/version.txt"
} >"$stage/BUILD-INFO"
rm -rf "$DEST"
mv "$stage" "$DEST"
log "built $DEST/$TARGET in $((SECONDS - start)) s"
echo "$DEST/$TARGET"
