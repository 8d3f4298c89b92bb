"""The SIMD instruction set that Inductor's C++ uses on this CPU, probed in the background.

Before a process first compiles C++ for a CPU, Inductor picks the SIMD instruction set
(AVX-512 with VNNI, AVX-512, AVX2, ...) by building and loading a small program for each
candidate the CPU reports, one after another. With an empty compile cache the builds take
0.4-2 s each (6.5 s in all on the 2-core VM, on the critical path of a first run). Later
processes find the builds on disk and only load them.

:func:`probe_vector_isa` starts those probes at once, each in a thread of its own (the work
is the compiler's, in processes of their own), while this process goes on tracing. Torch
keeps each probe's answer for the process and Inductor's own choice, made later, finds them
done: it is the same choice, made sooner.

    >>> choice = probe_vector_isa()
    >>> isinstance(choice.result(timeout=600), str)
    True
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

__all__ = ["probe_vector_isa"]

_lock = threading.Lock()
_choice: Future | None = None


def probe_vector_isa() -> Future:
    """A future of Inductor's SIMD choice here (``str(pick_vec_isa())``: ``"avx512"``,
    ``"INVALID_VEC_ISA"`` for none, ...).

    The first call starts the probes in daemon threads; every call returns the same future.
    """
    global _choice
    with _lock:
        if _choice is None:
            _choice = Future()
            threading.Thread(
                target=_probe, args=(_choice,), name="batchenv-vector-isa", daemon=True
            ).start()
        return _choice


def _probe(choice: Future) -> None:
    try:
        from torch._inductor import cpu_vec_isa

        probes = [
            threading.Thread(target=_check, args=(isa,), name=f"batchenv-probe-{isa}", daemon=True)
            for isa in _candidates(cpu_vec_isa)
        ]
        for probe in probes:
            probe.start()
        for probe in probes:
            probe.join()
        choice.set_result(str(cpu_vec_isa.pick_vec_isa()))
    except BaseException as error:  # pick_vec_isa raising here raises in the compile too
        choice.set_exception(error)


def _candidates(cpu_vec_isa) -> list:
    """The instruction sets torch would probe on this CPU (x86 only: elsewhere it checks
    one at most)."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    flags = cpu_vec_isa.x86_isa_checker()
    return [
        isa
        for isa in cpu_vec_isa.supported_vec_isa_list
        if all(flag in flags for flag in str(isa).split())
    ]


def _check(isa) -> None:
    """Torch's own check of ``isa`` (its result is cached on the instance)."""
    try:
        bool(isa)
    except Exception:  # pick_vec_isa checks again and reports
        pass
