"""What the operating system tells that Python's standard library does not: behind one module per
question, each with a portable default that answers "unknown"."""
