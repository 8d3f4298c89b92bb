"""Stack-allocated temporaries for the CPU programs that ``compile_program`` builds.

A compiled rollout chunk on a CPU is one fused C++ kernel, but its C++ wrapper allocates every
temporary the kernel passes between its loops as a full ``at::Tensor`` (~28 a step for PPO on
CartPole, ~0.5-1 us each), a large part of a step's time. Inductor can instead declare
temporaries of up to 100 KB in all as arrays on the C stack; it offers this to AOTInductor
(``aot_inductor.allow_stack_allocation``, with its ``CppWrapperCpuArrayRef`` wrapper).

Inductor picks its CPU C++ wrapper class once per process, from the global config, when it
first compiles anything. :func:`enable_per_program_choice` replaces that fixed choice with one
made per program from the config the program is compiled under, so ``compile_program`` can
turn the option on for its programs alone through ``torch.compile(options=...)`` and leave
every other ``torch.compile`` in the process as torch would compile it, but for one fix to
the C++ of loops (:func:`_distinct_loop_outputs`), which torch's own wrapper crashes on.
"""

from __future__ import annotations

import functools

#: The Inductor option that compile_program sets for its CPU programs.
OPTION = "aot_inductor.allow_stack_allocation"


def _chosen_wrapper() -> type:
    """The CPU C++ wrapper class for the config of the program being compiled."""
    from torch._inductor import config
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    if config.aot_inductor.allow_stack_allocation:
        return _stack_temporaries_wrapper()
    return _distinct_loop_outputs(CppWrapperCpu)


@functools.cache
def _distinct_loop_outputs(base: type) -> type:
    """``base`` with one fix to its C++ for a loop (a while_loop, which torch's ``scan``
    becomes): when two carried values of a loop's body are one buffer, Inductor moves the
    buffer into the first slot and then moves the emptied handle into the second, which
    crashes the next iteration. Here the second slot gets a new handle to the same tensor."""
    from torch._inductor import ir

    class DistinctLoopOutputs(base):
        @staticmethod
        def create(*args, **kwargs):
            return DistinctLoopOutputs()

        def codegen_subgraph_suffix(self, subgraph, outer_inputs, outer_outputs):
            first: dict[str, str] = {}
            for inner, outer in zip(subgraph.graph.graph_outputs, outer_outputs):
                source = inner.codegen_reference()
                if isinstance(inner, ir.ShapeAsConstantBuffer):
                    self.writeline(f"{outer} = {source};")
                elif source in first:
                    self.writeline(f"{outer}.reset();")
                    self.writeline(
                        f"{{ AtenTensorHandle handle; AOTI_TORCH_ERROR_CODE_CHECK("
                        f"aoti_torch_assign_tensors_out({first[source]}, &handle)); "
                        f"{outer} = RAIIAtenTensorHandle(handle); }}"
                    )
                else:
                    first[source] = outer
                    self.writeline(f"{outer}.reset();")
                    self.writeline(f"{outer} = std::move({source});")

    return DistinctLoopOutputs


@functools.cache
def _stack_temporaries_wrapper() -> type:
    """AOTInductor's ArrayRef wrapper, with every returned tensor the caller's own.

    AOTInductor returns an output that lives in a stack array by copying it into a
    thread-local tensor that the *next* call overwrites: a rollout's chunks would all return
    the last chunk's ``done``. Here no output (nor a buffer an output reuses or views) is on
    the stack, so outputs are fresh tensors as in Inductor's own wrapper; a program that
    would still return a cached output is refused while it is generated.
    """
    from torch._inductor import ir
    from torch._inductor.codegen.cpp_wrapper_cpu_array_ref import CppWrapperCpuArrayRef
    from torch._inductor.virtualized import V

    def storage_name(node) -> str | None:
        while isinstance(node, ir.BaseView):
            node = node.data
        try:
            return node.get_name()
        except (AttributeError, NotImplementedError):  # None and shape outputs
            return None

    class StackTemporaries(_distinct_loop_outputs(CppWrapperCpuArrayRef)):
        @staticmethod
        def create(*args, **kwargs):
            return StackTemporaries()

        def _output_storage(self) -> set[str]:
            names = {storage_name(node) for node in V.graph.graph_outputs}
            return names | set(V.graph.get_output_names())

        def can_stack_allocate_buffer(self, buffer) -> bool:
            return (
                super().can_stack_allocate_buffer(buffer)
                and buffer.get_name() not in self._output_storage()
            )

        def make_buffer_reuse(self, old, new, delete_old: bool) -> str:
            if old.get_name() in self.stack_allocated_buffers and (
                new.get_name() in self._output_storage()
            ):
                return self.make_buffer_allocation(new)  # an output gets its own tensor
            return super().make_buffer_reuse(old, new, delete_old)

        def generate_return(self, output_refs: list[str]) -> None:
            super().generate_return(output_refs)
            if self._output_storage() & set(self.stack_allocated_buffers):
                raise RuntimeError(
                    "batchenv: an output of this CPU program would be a stack array that "
                    "the next call overwrites; compile it without "
                    f"{OPTION!r}"
                )

    return StackTemporaries


class _ChosenPerProgram(type):
    """Every class attribute (``create``, ``supports_caching``, ...) is the chosen class's."""

    def __getattr__(cls, name: str):
        return getattr(_chosen_wrapper(), name)


class _PerProgramCpuWrapper(metaclass=_ChosenPerProgram):
    """Inductor's CPU C++ wrapper class, chosen when each program is generated."""


@functools.cache
def enable_per_program_choice() -> bool:
    """Register the per-program choice for "cpu" (once); False where this torch has no
    such registry, in which case compile_program leaves the option off."""
    try:
        from torch._inductor.codegen import common
    except ImportError:  # pragma: no cover - a torch without Inductor
        return False
    registry = getattr(common, "device_codegens", None)
    common.init_backend_registration()
    cpu = registry.get("cpu") if isinstance(registry, dict) else None
    if cpu is None or not hasattr(cpu, "cpp_wrapper_codegen"):
        return False  # pragma: no cover - another torch's layout
    cpu.cpp_wrapper_codegen = _PerProgramCpuWrapper
    return True
