"""What the tests and the benchmarks share: data generators, a git + git-lfs environment, the
real processes they start and stop by PID on loopback (`git xet serve`, SeaweedFS, PostgreSQL,
nginx, the whole scale-out deployment), the fault proxy, and the hf-xet and huggingface.js peers."""
