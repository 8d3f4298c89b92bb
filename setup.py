"""Build script: metadata lives in setup.cfg; this file only declares the C++ batcher."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_INFO = "batchenv/_build_info.py"


def source_commit() -> str | None:
    """``git rev-parse HEAD`` of the source tree being built, or None without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class BuildPyWithCommit(build_py):
    """build_py that also writes batchenv/_build_info.py (GIT_COMMIT) into the build, so
    that a non-editable install can record the commit it was built from in config.json."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the commit from the checkout itself
        target = Path(self.build_lib) / BUILD_INFO
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            '"""Written by setup.py when this package was built."""\n\n'
            f"GIT_COMMIT = {source_commit()!r}\n"
        )


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

setup(ext_modules=ext_modules, cmdclass={"build_py": BuildPyWithCommit})
