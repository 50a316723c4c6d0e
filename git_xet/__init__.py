"""git-xet: the XET content-addressable storage protocol as a Git LFS custom transfer agent."""

__version__ = "0.1.0"
