"""Client layer: talk to a XET store (a CAS server over HTTP, a directory store, or a bucket store)
through one XetBackend interface; store locations are parsed here (location.py)."""

import sys

# httpx (client/http_client.py: every request) imports its command-line interface
# (click and pygments, ~10 ms) whenever click is installed; nothing here uses it. A None entry
# makes that one import fail, which httpx expects (it then defines a stub `main`).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
