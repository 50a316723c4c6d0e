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
        # -O3 is gcc's and clang's spelling; MSVC's cl takes /O2 (and warns about -O3).
        ext.extra_compile_args = ["/O2"] if self.compiler.compiler_type == "msvc" else ["-O3"]
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"warning: {ext.name} not built ({exc}); using pure Python")


setup(
    ext_modules=[
        Extension(
            "git_xet.core._gearhash",
            sources=["git_xet/core/_gearhash.c"],
        ),
        Extension("git_xet.core._crc64", sources=["git_xet/core/_crc64.c"]),
        Extension("git_xet.core._bg4", sources=["git_xet/core/_bg4.c"]),
        Extension("git_xet.core._merkle", sources=["git_xet/core/_merkle.c"]),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
