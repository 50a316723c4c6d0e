"""Every git_xet module imports where fcntl, fork and OpenSSL's libcrypto (through ctypes) are
missing, as on Windows: a fresh interpreter with an import hook that refuses them imports the
whole package (a subprocess, so the hook cannot leak into other tests)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_IMPORT_ALL = textwrap.dedent(
    """
    import ctypes, ctypes.util, importlib, importlib.abc, os, pkgutil, sys

    BLOCKED = {"fcntl", "msvcrt", "termios", "resource", "grp", "pwd"}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    sys.meta_path.insert(0, Refuse())
    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            delattr(os, name)
    real_find, real_cdll = ctypes.util.find_library, ctypes.CDLL.__init__

    def find_library(name):
        return None if "crypto" in name or "ssl" in name else real_find(name)

    def cdll_init(self, name, *args, **kwargs):
        if name and ("crypto" in str(name) or "ssl" in str(name)):
            raise OSError(f"{name}: blocked")
        real_cdll(self, name, *args, **kwargs)

    ctypes.util.find_library, ctypes.CDLL.__init__ = find_library, cdll_init

    import git_xet
    names = sorted(m.name for m in pkgutil.walk_packages(git_xet.__path__, "git_xet.") if m.name != "git_xet.__main__")
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    assert "fcntl" not in sys.modules and not hasattr(os, "fork")
    print(len(names))
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
    """
)


def test_every_module_imports_without_fcntl_fork_or_libcrypto() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout.split()[0]) > 100  # the walk found the package's modules
