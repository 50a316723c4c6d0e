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
