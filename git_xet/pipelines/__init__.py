"""Pipelines: turn files into XET objects and back, on top of the protocol core."""
