"""The XET protocol core: pure functions and data classes, no network, no git, no files.

Everything above (storage, client, pipelines, agent, server) builds on these modules:
chunking, hashes, compression, xorb and shard formats.
"""
