# Shared set-up for install/*.sh: system packages, then a virtualenv with git-xet in it.
# Usage: EXTRAS=test source install/common.sh   (sets ROOT and VENV)
#   GIT_XET_VENV=DIR     where the virtualenv goes (default: .venv in the checkout)
#   GIT_XET_EDITABLE=0   install a copy instead of an editable checkout (the installer does)
#   PYTHON=EXE           the interpreter the virtualenv is made from (default: python3 on PATH)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GIT_XET_VENV:-$ROOT/.venv}"
EXTRAS="${EXTRAS:-}"
PYTHON="${PYTHON:-python3}"

missing=()
command -v "$PYTHON" >/dev/null || missing+=(python3)
command -v git >/dev/null || missing+=(git)
command -v git-lfs >/dev/null || missing+=(git-lfs)
command -v cc >/dev/null || missing+=(gcc)
if command -v "$PYTHON" >/dev/null; then
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  "$PYTHON" - <<'PY' || missing+=(python3-dev)
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
else
  missing+=(python3-venv python3-dev)
fi
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "git-xet: installing system packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # apt and debconf chatter goes to a log, shown only if the install fails.
    aptlog="$(mktemp)"
    if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; } >"$aptlog" 2>&1; then
      tail -n 30 "$aptlog" >&2
      echo "git-xet: apt-get failed; full log: $aptlog" >&2
      exit 1
    fi
    rm -f "$aptlog"
  else
    echo "git-xet: missing system packages: ${missing[*]}" >&2
    echo "         install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}) and rerun." >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
spec="$ROOT"
[ -n "$EXTRAS" ] && spec="$ROOT[$EXTRAS]"
log="$VENV/install.log"
# Build-backend chatter goes to a log; it is shown only when the install fails.
if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip &&
       if [ "${GIT_XET_EDITABLE:-1}" = 0 ]; then
         "$VENV/bin/python" -m pip install --disable-pip-version-check --force-reinstall --no-deps "$spec" &&
         "$VENV/bin/python" -m pip install --disable-pip-version-check "$spec"
       else
         # compat mode: a plain path entry; the default import-hook finder costs every agent
         # start ~20 ms, and git-lfs starts eight of them one after another.
         "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$spec" --config-settings editable_mode=compat
       fi; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "git-xet: installing into $VENV failed; full log: $log" >&2
  exit 1
fi
