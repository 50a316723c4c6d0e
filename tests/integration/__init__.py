"""The product end to end with real parts: git and git-lfs, `git xet serve`, hf-xet and
huggingface.js, SeaweedFS, PostgreSQL and nginx, faults, crashes and hostile clients."""
