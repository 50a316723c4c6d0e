#!/usr/bin/env bash
# The portable path, proven on this Linux machine (test.sh runs this after the whole suite):
# - the agent's git push/clone tests and the server's tests once with every accelerator off
#   (GIT_XET_PORTABLE=1: no fork server, no forked workers, sendfile, madvise or allocator tuning),
#   with the import test (every module imports without fcntl, fork or libcrypto);
# - the same tests once without the C extensions (GIT_XET_NO_NATIVE=1: pure Python);
# - the unit tests and the git end-to-end tests on the oldest and newest Python declared (3.10,
#   3.13, from pyenv), each in a virtualenv of its own under .cache/; a missing one is said, not failed.
# Subsets, not the whole suite: these runs add a few minutes to CI, not another suite's worth.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GIT_XET_VENV:-$ROOT/.venv}"
PYENV_VERSIONS="${PYENV_ROOT:-$HOME/.pyenv}/versions"
E2E=(tests/integration/test_e2e_git.py tests/integration/test_server.py)
cd "$ROOT"
echo "git-xet CI: accelerators off (GIT_XET_PORTABLE=1)"
GIT_XET_PORTABLE=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${E2E[@]}" tests/integration/test_portable_imports.py
echo "git-xet CI: without the C extensions (GIT_XET_NO_NATIVE=1)"
GIT_XET_NO_NATIVE=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${E2E[@]}"
for version in 3.10 3.13; do
  python="$(ls -d "$PYENV_VERSIONS/$version".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -z "$python" ]; then
    echo "git-xet CI: Python $version is not installed ($PYENV_VERSIONS/$version.*): its unit and git end-to-end run is skipped"
    continue
  fi
  echo "git-xet CI: Python $version ($python): unit tests and git end-to-end tests"
  GIT_XET_VENV="$ROOT/.cache/venv-$version" PYTHON="$python" EXTRAS=test bash -c "source '$ROOT/install/common.sh'"
  # Beside the unit layer: the HTTP client (httpx/httpcore behave per Python) and what an agent imports before init.
  "$ROOT/.cache/venv-$version/bin/python" -m pytest -q -p no:cacheprovider tests/unit tests/integration/test_e2e_git.py \
    tests/integration/test_http_client.py tests/integration/test_agent_imports.py
done
