"""Pipelines: turn files into XET objects and back, on top of the protocol core and a client
backend: hashing (file_hashing), upload (dedup, xorb packing, shard), download (scheduled,
verified), and the public API that opens a store for them (store_api, re-exported by git_xet)."""
