"""Reading a kernel's SASS: the instruction mix by class, and how many instructions one
warp executes, loops weighted by trip counts read off the Triton IR."""

from __future__ import annotations

import inspect
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

SASS_CLASSES = {
    "global memory": "LDG STG ATOMG ATOM RED LD ST",
    "local memory (spills)": "LDL STL",
    "shared memory": "LDS STS LDSM ATOMS",
    "constant loads": "LDC ULDC",
    "fp32": "FADD FMUL FFMA FSETP FMNMX FSEL FSET FCHK FADD32I FMUL32I FFMA32I FSWZADD",
    "fp64": "DADD DMUL DFMA DSETP DMNMX",
    "special functions (MUFU)": "MUFU",
    "integer": (
        "IMAD IADD3 IADD IABS IMNMX ISETP LOP3 LOP SHF SHL SHR LEA IDP POPC FLO BREV VIADD "
        "VIMNMX VIADDMNMX IMUL PRMT SGXT BMSK IMAD32I IADD32I ISCADD"
    ),
    "conversions": "F2I I2F F2F I2FP F2FP I2I FRND",
    "moves and selects": "MOV SEL CS2R S2R S2UR P2R R2P PLOP3 HFMA2 MOV32I",
    "warp shuffles": "SHFL VOTE REDUX MATCH",
    "barriers and convergence": (
        "BAR WARPSYNC BSSY BSYNC BREAK BMOV MEMBAR DEPBAR ERRBAR CCTL NANOSLEEP"
    ),
    "control flow": "BRA EXIT RET CALL JMP BRX YIELD BPT",
}
_SASS_CLASS = {op: cls for cls, ops in SASS_CLASSES.items() for op in ops.split()}
_SASS_INSTRUCTION = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);"
)
_SASS_LABEL = re.compile(r"^(\.L_x_\d+):")
_SASS_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_SASS_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def sass_class(opcode: str) -> str:
    """The instruction class of a SASS opcode (``IMAD.MOV.U32`` -> ``integer``); ``U``-prefixed
    uniform-datapath ops that are not listed count as ``uniform datapath``."""
    base = opcode.split(".", 1)[0]
    if base in _SASS_CLASS:
        return _SASS_CLASS[base]
    if base.startswith("U") and base[1:] in _SASS_CLASS:
        return "uniform datapath"
    return "other"


@dataclass(frozen=True)
class SassSummary:
    """What the report takes from a kernel's SASS."""

    static: int  #: instructions in the kernel (NOPs left out)
    mix: dict[str, int]  #: static count per :data:`SASS_CLASSES` class
    dynamic: int | None  #: instructions one warp executes (loops weighted by trip counts)
    loops: tuple[tuple[int, int, int], ...]  #: (source line, trips, body instructions)
    unattributed_back_edges: int  #: backward branches not traced to a source loop


def parse_sass(text: str, loop_trips: Callable[[str, int], int | None]) -> SassSummary:
    """Summarise ``nvdisasm -c -g`` output of one kernel.

    The dynamic count follows the main body up to its last ``EXIT`` (cold paths laid out after
    it are left out) and counts every instruction once, except inside loops: a backward branch
    whose line annotation ``loop_trips(file, line)`` recognises as a source loop weights the
    instructions from its target to itself by the trip count (nested loops multiply). Both
    sides of a data-dependent branch are counted, so it is an upper bound for one warp.
    """
    instructions: list[tuple[str, str | None, str | None, int]] = []
    labels: dict[str, int] = {}
    where: tuple[str | None, int] = (None, 0)
    for line in text.splitlines():
        if m := _SASS_LINE.search(line):
            where = (m.group(1), int(m.group(2)))
            continue
        if m := _SASS_LABEL.match(line):
            labels[m.group(1)] = len(instructions)
            continue
        if m := _SASS_INSTRUCTION.match(line):
            opcode, rest = m.group(2), m.group(3)
            if opcode == "NOP":
                continue
            target = _SASS_TARGET.search(rest)
            instructions.append((opcode, target and target.group(1), where[0], where[1]))
    exits = [i for i, ins in enumerate(instructions) if ins[0] == "EXIT"]
    end = exits[-1] if exits else len(instructions) - 1
    mix = Counter(sass_class(ins[0]) for ins in instructions)
    loops, stray = [], 0
    for i, (opcode, target, file, line) in enumerate(instructions[: end + 1]):
        if not opcode.startswith("BRA") or target not in labels or labels[target] > i:
            continue
        trips = loop_trips(file or "", line)
        if trips is None:
            stray += 1
            continue
        loops.append((labels[target], i, trips, line))
    dynamic = 0
    for i in range(end + 1):
        weight = 1
        for first, last, trips, _ in loops:
            if first <= i <= last:
                weight *= trips
        dynamic += weight
    return SassSummary(
        static=len(instructions),
        mix=dict(mix.most_common()),
        dynamic=dynamic,
        loops=tuple((line, trips, last - first + 1) for first, last, trips, line in loops),
        unattributed_back_edges=stray,
    )


_TTIR_CONSTANT = re.compile(r"%(\w+) = arith\.constant (-?\d+) : i(?:32|64)")
_TTIR_FOR = re.compile(r"scf\.for %(\w+) = %(\w+) to %(\w+) step %(\w+)")
_SOURCE_FOR = re.compile(r"^\s*for\s+(\w+)\s+in\s+(?:tl\.)?(?:static_)?range\(")


def loop_trip_counts(kernel_fn: Callable, ttir: str) -> Callable[[str, int], int | None]:
    """A ``loop_trips(file, line)`` for :func:`parse_sass`: the trip count of the ``for``
    statement of ``kernel_fn`` at that line, read off the constant bounds of the matching
    ``scf.for`` in the Triton IR (the n-th loop over a variable in the source is the n-th
    ``scf.for`` over it in the IR). None for any other line, or a loop with runtime bounds."""
    source_file = os.path.realpath(inspect.getsourcefile(kernel_fn))
    lines, first_line = inspect.getsourcelines(kernel_fn)
    constants = {name: int(value) for name, value in _TTIR_CONSTANT.findall(ttir)}
    ir_loops: dict[str, list[int | None]] = {}
    for var, low, high, step in _TTIR_FOR.findall(ttir):
        var = re.sub(r"_\d+$", "", var)
        bounds = [constants.get(x) for x in (low, high, step)]
        trips = None
        if None not in bounds and bounds[2] > 0:
            trips = max(0, -(-(bounds[1] - bounds[0]) // bounds[2]))
        ir_loops.setdefault(var, []).append(trips)

    def loop_trips(file: str, line: int) -> int | None:
        if not file or os.path.realpath(file) != source_file:
            return None
        index = line - first_line
        if not 0 <= index < len(lines) or not (m := _SOURCE_FOR.match(lines[index])):
            return None
        var = m.group(1)
        ordinal = sum(
            1 for text in lines[:index] if (n := _SOURCE_FOR.match(text)) and n.group(1) == var
        )
        found = ir_loops.get(var, [])
        return found[ordinal] if ordinal < len(found) else None

    return loop_trips
