"""The C extensions build with gcc and clang, warning-free under -Wall -Wextra -Wpedantic (no
compiler builtin without a portable fallback, so MSVC builds them too), and each build gives
the answers of the pure-Python references (test_native_equivalence.py, run against it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import git_xet

PACKAGE = Path(git_xet.__file__).parent
ROOT = PACKAGE.parent
SOURCES = sorted((PACKAGE / "core").glob("_*.c"))
WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_extensions_build_cleanly_and_agree_with_references(compiler: str, tmp_path: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (apt-get install {compiler})")
    assert len(SOURCES) == 4
    copy = tmp_path / "git_xet"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    for source in SOURCES:
        built = subprocess.run(
            [compiler, "-std=c11", "-O2", "-shared", "-fPIC", *WARNINGS, f"-I{include}", str(source), "-o", str(copy / "core" / f"{source.stem}{suffix}")],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert built.returncode == 0 and built.stderr == "", built.stderr
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("GIT_XET_NO_NATIVE", None)
    where = subprocess.run([sys.executable, "-c", "import git_xet.core._crc64 as m; print(m.__file__)"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    assert where.stdout.startswith(str(tmp_path))  # the build under test, not the installed one
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests/unit/test_native_equivalence.py")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )
    assert tests.returncode == 0, tests.stdout[-3000:]
