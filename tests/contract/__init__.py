"""Contracts every implementation must pass: each object store (directory, S3) and each
metadata index (SQLite, PostgreSQL) runs the same tests."""
