"""Build hook for the optional C extensions (chunking, CRC-64, BG4 predictor counts, merkle node texts).

Everything else lives in pyproject.toml. The extension is optional: when no C compiler is
available the build still succeeds and git_xet falls back to its pure-Python chunker (with a
warning at run time), so `pip install .` never fails for lack of a compiler.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that reports, instead of failing on, a missing compiler."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "no extension"
            print(f"warning: git_xet C extension not built ({exc}); using pure Python")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"warning: {ext.name} not built ({exc}); using pure Python")


setup(
    ext_modules=[
        Extension(
            "git_xet.core._gearhash",
            sources=["git_xet/core/_gearhash.c"],
            extra_compile_args=["-O3"],
        ),
        Extension("git_xet.core._crc64", sources=["git_xet/core/_crc64.c"], extra_compile_args=["-O3"]),
        Extension("git_xet.core._bg4", sources=["git_xet/core/_bg4.c"], extra_compile_args=["-O3"]),
        Extension("git_xet.core._merkle", sources=["git_xet/core/_merkle.c"], extra_compile_args=["-O3"]),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
