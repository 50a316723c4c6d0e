"""Storage layer: the CAS store (verified objects in a directory or an S3 bucket, with a SQLite or
PostgreSQL index) that the server runs on and the serverless directory and bucket stores reuse."""
