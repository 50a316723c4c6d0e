#!/usr/bin/env bash
# The main job: set up git-xet on a fresh machine, then show content-defined dedup on a model-sized
# file: v1, then v2 with 1% of it edited in place and a 1 KiB insertion near the start.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SIZE_MIB="${DEMO_SIZE_MIB:-256}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$VENV/bin/python" - "$work" "$SIZE_MIB" <<'PY'
import os, random, sys
work, size = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
rng = random.Random(42)
piece = 16 * 1024 * 1024  # randbytes takes at most 2**31 bits at a time
v1 = bytearray(b"".join(rng.randbytes(min(piece, size - i)) for i in range(0, size, piece)))
with open(os.path.join(work, "model-v1.bin"), "wb") as f:
    f.write(v1)
# v2: ten in-place edits totalling 1% of the file, plus an insertion that shifts everything after it.
for k in range(10):
    at = (k * 2 + 1) * size // 21
    v1[at : at + size // 1000] = rng.randbytes(size // 1000)
v1[4096:4096] = rng.randbytes(1024)
with open(os.path.join(work, "model-v2.bin"), "wb") as f:
    f.write(v1)
PY

echo "== git xet hash (XET file hashes, identical to hf-xet's)"
"$VENV/bin/git-xet" hash --sha256 "$work/model-v1.bin" "$work/model-v2.bin"
echo
echo "== git xet compare (what pushing v2 after v1 uploads)"
"$VENV/bin/git-xet" compare "$work/model-v1.bin" "$work/model-v2.bin"
