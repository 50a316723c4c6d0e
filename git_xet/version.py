"""git-xet's version, written once: pyproject.toml reads it from here (`[tool.setuptools.dynamic]`)
and the package root re-exports it as `git_xet.__version__` on first use.

A module of its own, holding one literal, so that reading it costs nothing: the HTTP client puts
it in its User-Agent as it is imported by the transfer agent, where importlib.metadata (which
scans the installed distributions) would cost milliseconds per agent.
"""

__version__ = "0.1.0"
