"""Inductor's SIMD probes started at once in the background (probe_vector_isa): the same
choice as torch's own, the probes of an empty cache running side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from torch._inductor import cpu_vec_isa

from batchenv.in_graph import vector_isa
from batchenv.in_graph.rollout import compile_program

# In a fresh process with an empty cache: the (start, end) of every g++ build torch runs
# while probe_vector_isa() makes its choice, the choice, and torch's own choice after it.
PROBE = """
import json, time, threading
import torch._inductor.cpp_builder as builder
builds, lock = [], threading.Lock()
build = builder.CppBuilder.build
def timed(self, *args, **kwargs):
    start = time.monotonic()
    try:
        return build(self, *args, **kwargs)
    finally:
        with lock:
            builds.append((start, time.monotonic()))
builder.CppBuilder.build = timed
from batchenv.in_graph.vector_isa import probe_vector_isa
choice = probe_vector_isa().result(timeout=300)
from torch._inductor.cpu_vec_isa import pick_vec_isa
print(json.dumps({"builds": builds, "choice": choice, "torch": str(pick_vec_isa())}))
"""


def test_every_call_returns_the_one_choice_torch_makes():
    choice = vector_isa.probe_vector_isa()
    assert vector_isa.probe_vector_isa() is choice
    assert choice.result(timeout=300) == str(cpu_vec_isa.pick_vec_isa())


def test_compiling_a_cpu_program_starts_the_probes(monkeypatch):
    monkeypatch.setattr(vector_isa, "_choice", None)
    compile_program(lambda x: x + 1, "cpu")  # nothing is traced before the first call
    assert vector_isa._choice is not None
    assert vector_isa._choice.result(timeout=300) == str(cpu_vec_isa.pick_vec_isa())


@pytest.mark.skipif(
    len(vector_isa._candidates(cpu_vec_isa)) < 2, reason="this CPU has one SIMD candidate or none"
)
def test_the_probes_of_an_empty_cache_build_side_by_side(tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["choice"] == result["torch"] != "INVALID_VEC_ISA"
    builds = sorted(result["builds"])
    assert len(builds) >= 2  # one probe build per candidate at least
    # The second build started before the first ended: torch alone builds one at a time.
    assert builds[1][0] < builds[0][1]


def test_a_failing_probe_gives_its_error_to_whoever_waits(monkeypatch):
    def broken(module):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(vector_isa, "_candidates", broken)
    monkeypatch.setattr(vector_isa, "_choice", None)
    with pytest.raises(RuntimeError, match="no compiler"):
        vector_isa.probe_vector_isa().result(timeout=60)
