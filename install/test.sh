#!/usr/bin/env bash
# Set up everything on a fresh machine (system packages, virtualenv, test deps), check lint and
# types (ruff, mypy: configured in pyproject.toml; any finding fails), build the manual
# (mkdocs build --strict into site/), and run the tests; with no test path given (CI), also the
# portable path and Python 3.10 and 3.13 (install/platforms.sh).
# Extra arguments go to pytest, e.g.  bash install/test.sh -k shard -x
EXTRAS=test source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
"$VENV/bin/ruff" check
"$VENV/bin/python" -m mypy
# The manual: a broken link, a missing page or an API docstring that no longer resolves fails here.
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$ROOT/site"
bash "$ROOT/install/peers.sh"
bash "$ROOT/install/services.sh"
"$VENV/bin/python" -m pytest --durations=25 "$@"
# The whole suite (no test path given, as .ci/run calls it): then the portable path and the other
# Pythons (install/platforms.sh).
for arg in "$@"; do
  case "$arg" in tests*) exit 0 ;; esac
done
exec bash "$ROOT/install/platforms.sh"
