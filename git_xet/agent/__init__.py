"""`git xet transfer`: the Git LFS custom transfer agent."""
