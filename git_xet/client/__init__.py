"""Client layer: talk to a XET store, either a CAS server over HTTP or a local directory."""
