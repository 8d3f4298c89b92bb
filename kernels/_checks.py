"""Argument checks shared by the batched envs of batchenv.kernels (classic control, Tag,
MinAtar).

They read shapes and dtypes only (static under ``torch.compile``, no host sync) and raise
ValueError naming the env class, the method and what was expected.
"""

from __future__ import annotations

from typing import Any

import torch


def describe(value: Any) -> str:
    """``"torch.int64 (3,)"`` for a tensor, else the type's name (for error messages)."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def is_integer_tensor(value: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``value`` is a tensor of ``shape`` with an integer dtype (bool is not one)."""
    return (
        isinstance(value, torch.Tensor)
        and tuple(value.shape) == shape
        and not value.dtype.is_floating_point
        and value.dtype != torch.bool
    )


def check_indices(env: Any, indices: Any, method: str) -> torch.Tensor:
    """``indices`` (a 1-D int64 tensor of rows) moved to ``env.device``."""
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.dim() != 1:
        raise ValueError(
            f"{type(env).__name__}.{method}: indices must be a 1-D int64 tensor, "
            f"got {describe(indices)}"
        )
    return indices.to(env.device)


def check_reset_mask(env: Any, reset_mask: Any) -> torch.Tensor:
    """``reset_mask`` (a bool tensor ``[num_envs]``) contiguous on ``env.device``."""
    if (
        not isinstance(reset_mask, torch.Tensor)
        or reset_mask.dtype != torch.bool
        or tuple(reset_mask.shape) != (env.num_envs,)
    ):
        raise ValueError(
            f"{type(env).__name__}.step: reset_mask must be a bool tensor of shape "
            f"({env.num_envs},), got {describe(reset_mask)}"
        )
    return reset_mask.to(env.device).contiguous()
