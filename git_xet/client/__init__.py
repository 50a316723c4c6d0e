"""Client layer: talk to a XET store, either a CAS server over HTTP or a local directory."""

import sys

# httpx (client/http_client.py: every request) imports its command-line interface
# (click and pygments, ~10 ms) whenever click is installed; nothing here uses it. A None entry
# makes that one import fail, which httpx expects (it then defines a stub `main`).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
