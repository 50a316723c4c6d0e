"""Storage layer: the CAS store (objects + SQLite index) shared by the server and the
serverless local store."""
