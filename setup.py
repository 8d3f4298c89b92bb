"""Build script: metadata lives in setup.cfg; this file only declares the C++ batcher."""

from pathlib import Path

from setuptools import setup

ext_modules = []
csrc = Path("algorithms/impala/csrc")
sources = sorted(str(p) for p in csrc.glob("*.cpp"))
if sources:
    from pybind11.setup_helpers import Pybind11Extension

    ext_modules.append(
        Pybind11Extension(
            "batchenv.algorithms.impala.batcher",
            sources,
            cxx_std=17,
            # Rebuild when a header changes (setuptools only compares these timestamps).
            depends=sorted(str(p) for p in csrc.glob("*.h")),
        )
    )

setup(ext_modules=ext_modules)
