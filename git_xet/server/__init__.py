"""`git xet serve`: a self-hostable XET CAS server (disk + SQLite), usable by hf-xet as is."""
