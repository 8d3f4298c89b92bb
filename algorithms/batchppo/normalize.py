"""StreamingNormalize: running mean and variance of a stream of batches (Welford / Chan).

BatchPPO keeps two (batch-ppo v1.4; docs/batchppo.md): observations are centred and scaled,
then clipped
to ±5; rewards are only scaled, then clipped to ±10. The statistics are float64 buffers of
an ``nn.Module``, so they travel in ``state_dict()``. As in batch-ppo, the variance is the
unbiased sample variance, ``std = sqrt(var + 1e-4)``, and values are only scaled once two
samples have been seen.

    >>> norm = StreamingNormalize((3,), clip=5.0)
    >>> norm.update(torch.randn(100, 3) * 4 + 2)
    >>> norm.transform(torch.full((1, 3), 2.0)).abs().max() < 0.5
    tensor(True)
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["StreamingNormalize"]

VARIANCE_EPSILON = 1e-4
"""Added to the variance before the square root (batch-ppo's value)."""


class StreamingNormalize(nn.Module):
    """Normalise values of shape ``shape`` by the statistics of all batches seen so far.

    Args:
        shape: shape of one value (the batch axes come before it).
        center: subtract the running mean.
        scale: divide by the running std (``sqrt(var + 1e-4)``).
        clip: clip the result to ``[-clip, clip]``; None: no clipping.
    """

    count: torch.Tensor
    mean: torch.Tensor
    m2: torch.Tensor

    def __init__(
        self,
        shape: tuple[int, ...],
        center: bool = True,
        scale: bool = True,
        clip: float | None = None,
        device: torch.device | str = "cpu",
    ):
        super().__init__()
        self.shape = tuple(shape)
        self.center, self.scale, self.clip = center, scale, clip
        as64 = dict(dtype=torch.float64, device=device)
        self.register_buffer("count", torch.zeros((), **as64))
        self.register_buffer("mean", torch.zeros(self.shape, **as64))
        self.register_buffer("m2", torch.zeros(self.shape, **as64))  # sum of squared deviations
        # transform()'s divisor, recomputed on the first transform() after the statistics
        # change (update, load_state_dict): evaluation reuses it for every step.
        self.register_buffer("divisor", torch.ones(self.shape, **as64), persistent=False)
        self._stale = False

    def update(self, value: torch.Tensor) -> None:
        """Fold a batch ``[..., *shape]`` into the statistics (Chan's parallel update)."""
        batch = value.detach().to(torch.float64).reshape(-1, *self.shape)
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(0)
        batch_m2 = (batch - batch_mean).square().sum(0)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * (n / total)
        self.m2 += batch_m2 + delta.square() * (self.count * n / total)
        self.count += n
        self._stale = True

    def variance(self) -> torch.Tensor:
        """Unbiased sample variance (ones before two samples have been seen)."""
        unbiased = self.m2 / (self.count - 1).clamp(min=1)
        return torch.where(self.count > 1, unbiased, torch.ones_like(self.m2))

    def std(self) -> torch.Tensor:
        """``sqrt(variance + 1e-4)``."""
        return torch.sqrt(self.variance() + VARIANCE_EPSILON)

    def transform(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` (``[..., *shape]``) normalised and clipped, in its own dtype."""
        out = value.to(torch.float64)
        if self.center:
            out = out - self.mean
        if self.scale:
            if self._stale:
                self.divisor = torch.where(self.count > 1, self.std(), torch.ones_like(self.m2))
                self._stale = False
            out = out / self.divisor
        if self.clip is not None:
            out = out.clamp(-self.clip, self.clip)
        return out.to(value.dtype)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._stale = True

    def extra_repr(self) -> str:
        return f"shape={self.shape}, center={self.center}, scale={self.scale}, clip={self.clip}"
