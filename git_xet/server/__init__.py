"""`git xet serve`: a self-hostable XET CAS server (a directory + SQLite, or S3 + PostgreSQL),
usable by hf-xet as is. app.py assembles it from its route modules, one per API."""
