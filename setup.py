"""Builds the compiled twins of the hot paths (Cython) next to their pure-Python modules.

Everything else about the package is in pyproject.toml. A missing compiler or header does
not fail the install: the extensions are left out with a warning, and rayqueue runs its
pure-Python twins (storage.extensions says so once at import).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# One extension per pure module it mirrors: <package>/_compiled/<name>.pyx twins <package>/<name>.py.
TWINS = [
    "storage/records/_compiled/reader.pyx",
    "storage/records/_compiled/columns.pyx",
    "storage/records/_compiled/builder.pyx",
    "storage/_compiled/log_validator.pyx",
    "storage/_compiled/cleaner.pyx",
]

# The offset map's MD5 comes from OpenSSL's libcrypto (headers: libssl-dev), the library
# behind hashlib.md5; without it that one twin is left out and its pure module runs.
LIBRARIES = {"storage/_compiled/cleaner.pyx": ["crypto"]}


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the pure-Python twins work without it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure leaves the pure twins
            _skip(f"could not build the compiled extensions: {exc}")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            _skip(f"could not build {ext.name}: {exc}")


def _skip(message: str) -> None:
    print(f"WARNING: rayqueue: {message}; the pure-Python code will be used.", file=sys.stderr)


def _extensions() -> list[Extension]:
    if os.environ.get("RAYQUEUE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _skip("Cython is not installed")
        return []
    extensions = [
        Extension(
            path[: -len(".pyx")].replace("/", "."),
            [path],
            extra_compile_args=["-O3", "-Wno-unused-function"],
            libraries=LIBRARIES.get(path, []),
        )
        for path in TWINS
        if Path(path).exists()
    ]
    return cythonize(extensions, compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
