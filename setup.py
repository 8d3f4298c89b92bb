"""Build script: metadata lives in setup.cfg; this file only declares the C++ batcher."""

from pathlib import Path

from setuptools import setup

ext_modules = []
sources = sorted(str(p) for p in Path("algorithms/impala/csrc").glob("*.cpp"))
if sources:
    from pybind11.setup_helpers import Pybind11Extension

    ext_modules.append(
        Pybind11Extension(
            "batchenv.algorithms.impala.batcher",
            sources,
            cxx_std=17,
        )
    )

setup(ext_modules=ext_modules)
