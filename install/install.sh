#!/usr/bin/env bash
# Install git-xet for this user (or system-wide as root) and register it with git-lfs.
#
#   bash install/install.sh                          # agent only (server-negotiated remotes)
#   bash install/install.sh --standalone ~/xet-store # every remote stores LFS objects there
#   bash install/install.sh --standalone https://xet.example.com
#
# Puts a virtualenv in $GIT_XET_HOME (default ~/.local/share/git-xet, or /opt/git-xet as root),
# links `git-xet` into $BIN_DIR (default ~/.local/bin, or /usr/local/bin as root) so that
# `git xet ...` works, writes the manual page (for `git xet --help`) into $MAN_DIR (default
# <BIN_DIR>/../share/man/man1, where man looks for the commands on PATH), then runs
# `git xet install --global "$@"`. Safe to run again.
#
# As root the defaults are system-wide whatever $HOME is; to install for one user from a root
# shell (e.g. a container), set them: GIT_XET_HOME=~/.local/share/git-xet BIN_DIR=~/.local/bin.
set -euo pipefail
if [ "$(id -u)" = 0 ]; then
  GIT_XET_HOME="${GIT_XET_HOME:-/opt/git-xet}"
  BIN_DIR="${BIN_DIR:-/usr/local/bin}"
else
  GIT_XET_HOME="${GIT_XET_HOME:-$HOME/.local/share/git-xet}"
  BIN_DIR="${BIN_DIR:-$HOME/.local/bin}"
fi
MAN_DIR="${MAN_DIR:-$(dirname "$BIN_DIR")/share/man/man1}"
export GIT_XET_VENV="$GIT_XET_HOME/venv" GIT_XET_EDITABLE=0

# A virtualenv is not a copy of Python: its bin/python is a link to the interpreter it was made
# from, and the standard library stays there. As root the install is for the machine (a service
# user runs /opt/git-xet/venv/bin/git-xet), so that interpreter must be one every user can run.
# The python3 first on root's PATH may not be (pyenv's lives in root's 0700 home: the service
# then fails with "Permission denied"); `venv --copies` does not help, since the copied binary
# still loads its library and stdlib from there. So as root: the PATH's python3 if others can
# reach it, else the system's /usr/bin/python3; a venv left by an earlier install on a private
# interpreter is made again.
others_can_run() {  # every directory above the interpreter's real file, and the file, allow o+x
  local path
  path="$("$1" -c 'import os, sys; print(os.path.realpath(sys._base_executable))' 2>/dev/null)" || return 1
  while [ "$path" != / ]; do
    [ -n "$(find "$path" -maxdepth 0 -perm -o+x)" ] || return 1
    path="$(dirname "$path")"
  done
}
if [ "$(id -u)" = 0 ] && [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if command -v python3 >/dev/null && ! others_can_run python3; then
    if [ -x /usr/bin/python3 ] && others_can_run /usr/bin/python3; then
      echo "git-xet: $(command -v python3) is private to root; making the virtualenv from /usr/bin/python3" >&2
      PYTHON=/usr/bin/python3
    else
      echo "git-xet: other users cannot run $(command -v python3) (a system-wide install needs that);" >&2
      echo "         install a system Python (Debian/Ubuntu: apt-get install python3) or set PYTHON=/path/to/python3" >&2
      exit 1
    fi
  fi
  if [ -x "$GIT_XET_VENV/bin/python" ] && ! others_can_run "$GIT_XET_VENV/bin/python"; then
    echo "git-xet: $GIT_XET_VENV was made from a Python other users cannot run; making it again" >&2
    rm -rf "$GIT_XET_VENV"
  fi
  export PYTHON
fi
EXTRAS=server source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$BIN_DIR"
ln -sf "$VENV/bin/git-xet" "$BIN_DIR/git-xet"
case ":$PATH:" in
  *":$BIN_DIR:"*) ;;
  *) echo "git-xet: add $BIN_DIR to your PATH to use \`git xet\`" >&2 ;;
esac
mkdir -p "$MAN_DIR"
"$BIN_DIR/git-xet" help --man >"$MAN_DIR/git-xet.1"
echo "git-xet: installed $GIT_XET_HOME, $BIN_DIR/git-xet and $MAN_DIR/git-xet.1" >&2
"$BIN_DIR/git-xet" install --global "$@"
"$BIN_DIR/git-xet" doctor || true
