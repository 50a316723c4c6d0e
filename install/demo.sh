#!/usr/bin/env bash
# The main job: set up git-xet on a fresh machine, then push and clone a model-sized file through
# git + git-lfs + our agent into the embedded serverless store, and show what v2 of the file sends
# (1% edited in place, plus an insertion that shifts everything after it).
# Uses a private git config: your ~/.gitconfig is not touched.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SIZE_MIB="${DEMO_SIZE_MIB:-256}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# GIT_XET_QUIET: the push summary comes from `git xet stats` below instead of the terminal.
export GIT_CONFIG_GLOBAL="$work/gitconfig" GIT_CONFIG_NOSYSTEM=1 GIT_XET_CACHE="$work/cache" GIT_XET_QUIET=1 PATH="$VENV/bin:$PATH"
git config --global user.name demo && git config --global user.email demo@git-xet.invalid
git config --global init.defaultBranch main
store="$work/xet-store"
git-xet install --standalone "$store" >/dev/null

# Bytes of every stored xorb: files, and the small ones packed as rows of objects.sqlite.
stored() { "$VENV/bin/python" -c 'import sys; from git_xet.storage.objects import DirectoryObjectStore as S; print(sum(n for _, n in S(sys.argv[1]).sizes("xorbs/")))' "$store"; }
seconds() { python3 -c 'import time; print(f"{time.time():.3f}")'; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }
# git-lfs draws its progress meter even for `git push -q`; keep it (and git's chatter) in a log
# that is shown only if the command fails.
quietly() { "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log" >&2; echo "demo: '$*' failed" >&2; exit 1; }; }

"$VENV/bin/python" - "$work/model.bin" "$SIZE_MIB" <<'PY'
import random, sys
path, size = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
rng = random.Random(42)
piece = 16 * 1024 * 1024  # randbytes takes at most 2**31 bits at a time
with open(path, "wb") as f:
    for i in range(0, size, piece):
        f.write(rng.randbytes(min(piece, size - i)))
PY

cd "$work"
git init -q --bare remote.git
quietly git clone -q remote.git repo
cd repo
git-xet track "*.bin" >/dev/null
mv "$work/model.bin" model.bin
git add . && git commit -qm "model v1"
t0=$(seconds); quietly git push -q origin main; t1=$(seconds)
v1_stored=$(stored)
echo "== push v1: ${SIZE_MIB} MiB in $(elapsed "$t0" "$t1") s; store holds $((v1_stored / 1048576)) MiB"
echo "   git xet stats: $(git-xet stats)"

"$VENV/bin/python" - model.bin <<'PY'
import random, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
rng = random.Random(7)
size = len(data)
for k in range(10):  # ten in-place edits, 1% of the file in total
    at = (k * 2 + 1) * size // 21
    data[at : at + size // 1000] = rng.randbytes(size // 1000)
data[4096:4096] = rng.randbytes(1024)  # and an insertion near the start
open(path, "wb").write(data)
PY
git commit -qam "model v2"
t0=$(seconds); quietly git push -q origin main; t1=$(seconds)
v2_stored=$(stored)
sent=$((v2_stored - v1_stored))
echo "== push v2: $(elapsed "$t0" "$t1") s; new data stored: $((sent / 1024)) KiB ($(python3 -c "print(f'{100 * $sent / ($SIZE_MIB * 1048576):.2f}')")% of the file)"
echo "   git xet stats: $(git-xet stats)"

cd "$work"
t0=$(seconds); quietly git clone -q remote.git clone; t1=$(seconds)
cmp -s clone/model.bin repo/model.bin && same=identical || same=DIFFERENT
echo "== clone: $(elapsed "$t0" "$t1") s; model.bin is $same to what was pushed"
(cd clone && git lfs fsck | tail -1)
