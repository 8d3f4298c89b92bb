"""SAC's networks: a tanh-squashed Gaussian or a categorical policy, and Q networks.

- :class:`GaussianPolicy` (Box actions): an MLP with a mean and a log-std head; the log std
  is squashed into [-5, 2] by a tanh (CleanRL, from SpinUp / Denis Yarats), an action is
  ``tanh(u) * scale + bias`` with ``u ~ N(mean, std)`` and ``scale``, ``bias`` mapping
  [-1, 1] onto the Box (CleanRL's action rescaling). Its log-probability carries the
  change-of-variables correction of :func:`squashed_log_prob` (Haarnoja et al. 2018, app. C).
- :class:`CategoricalPolicy` (Discrete actions): an MLP of logits; the Gumbel-Softmax
  variant samples through :func:`gumbel_softmax_sample`.
- :class:`QNetwork`: ``Q(s, a)`` with the action concatenated to the observation (Box
  actions, and the Gumbel-Softmax variant's one-hot actions as SLM Lab v4's QMLPNet);
  :class:`DiscreteQNetwork`: ``Q(s, .)`` for every action at once (the expectation variant).

Noise comes from an explicit ``torch.Generator``, so acting and updating are reproducible.

    >>> policy = GaussianPolicy(3, torch.tensor([-2.0]), torch.tensor([2.0]), (64, 64))
    >>> action, log_prob = policy.sample(torch.zeros(5, 3), torch.Generator().manual_seed(0))
    >>> action.shape, log_prob.shape
    (torch.Size([5, 1]), torch.Size([5]))
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "CategoricalPolicy",
    "DiscreteQNetwork",
    "GaussianPolicy",
    "QNetwork",
    "gumbel_max_sample",
    "gumbel_softmax_sample",
    "mlp",
    "squashed_log_prob",
]

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
_LOG2 = math.log(2.0)


def mlp(inputs: int, hidden: tuple[int, ...], outputs: int | None = None) -> nn.Sequential:
    """Linear layers of ``hidden`` sizes, each followed by a ReLU, then a linear layer to
    ``outputs`` (None: none, the last hidden layer's features are the output)."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(inputs, size), nn.ReLU()]
        inputs = size
    if outputs is not None:
        layers.append(nn.Linear(inputs, outputs))
    return nn.Sequential(*layers)


def squashed_log_prob(
    u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """log pi(a) of ``a = tanh(u) * scale + bias`` with ``u ~ N(mean, exp(log_std))``, ``[B]``.

    ``log N(u) - sum_i log(scale_i * (1 - tanh(u_i)^2))``, with
    ``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`` (exact and finite for any u;
    CleanRL writes ``log(scale * (1 - tanh(u)^2) + 1e-6)``).

        >>> squashed_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1),
        ...                   torch.ones(1)).item()   # log N(0; 0, 1) - log 1
        -0.9189385175704956
    """
    gaussian = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = torch.log(scale) + 2.0 * (_LOG2 - u - F.softplus(-2.0 * u))
    return (gaussian - log_det).sum(-1)


def gumbel_max_sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Categorical samples ``[B]`` of ``logits`` ``[B, A]``: ``argmax(logits + g)``, g Gumbel."""
    return (logits + _gumbel_noise(logits, generator)).argmax(-1)


def _gumbel_noise(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    uniform = torch.rand(
        logits.shape, generator=generator, device=logits.device, dtype=logits.dtype
    )
    tiny = torch.finfo(logits.dtype).tiny
    return -torch.log(-torch.log(uniform.clamp(tiny, 1.0 - 1e-7)))


def gumbel_softmax_sample(
    logits: torch.Tensor, temperature: float, generator: torch.Generator
) -> torch.Tensor:
    """A straight-through Gumbel-Softmax sample ``[B, A]`` (SLM Lab's GumbelSoftmax.rsample).

    The forward value is the one-hot of ``argmax(logits + g)`` (a Categorical sample, g
    Gumbel noise); the gradient is that of the relaxed sample
    ``softmax((logits + g) / temperature)`` (Jang et al. 2017; Maddison et al. 2017).
    """
    relaxed = torch.softmax((logits + _gumbel_noise(logits, generator)) / temperature, dim=-1)
    hard = F.one_hot(relaxed.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return hard - relaxed.detach() + relaxed


class GaussianPolicy(nn.Module):
    """Tanh-squashed Gaussian policy over a bounded Box ``[low, high]`` (flattened)."""

    def __init__(
        self,
        observ_size: int,
        low: torch.Tensor,
        high: torch.Tensor,
        hidden: tuple[int, ...],
    ):
        super().__init__()
        action_size = low.numel()
        self.trunk = mlp(observ_size, hidden)
        features = hidden[-1] if hidden else observ_size
        self.mean = nn.Linear(features, action_size)
        self.log_std = nn.Linear(features, action_size)
        self.register_buffer("action_scale", ((high - low) / 2.0).float().flatten())
        self.register_buffer("action_bias", ((high + low) / 2.0).float().flatten())

    def forward(self, observ: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the pre-tanh Gaussian, each ``[B, A]``."""
        features = self.trunk(observ)
        log_std = torch.tanh(self.log_std(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(features), log_std

    def sample(
        self, observ: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action ``[B, A]`` in the Box and its log-probability ``[B]``."""
        mean, log_std = self(observ)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * noise
        action = torch.tanh(u) * self.action_scale + self.action_bias
        return action, squashed_log_prob(u, mean, log_std, self.action_scale)

    def mode(self, observ: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean) * scale + bias`` ``[B, A]`` (evaluation)."""
        mean, _ = self(observ)
        return torch.tanh(mean) * self.action_scale + self.action_bias


class CategoricalPolicy(nn.Module):
    """Logits ``[B, A]`` of a categorical policy over ``actions`` choices."""

    def __init__(self, observ_size: int, actions: int, hidden: tuple[int, ...]):
        super().__init__()
        self.logits = mlp(observ_size, hidden, actions)

    def forward(self, observ: torch.Tensor) -> torch.Tensor:
        return self.logits(observ)

    def sample(self, observ: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Sampled actions ``[B]`` (int64, 0-based)."""
        return gumbel_max_sample(self(observ), generator)

    def mode(self, observ: torch.Tensor) -> torch.Tensor:
        """The most likely actions ``[B]`` (evaluation)."""
        return self(observ).argmax(-1)


class QNetwork(nn.Module):
    """``Q(s, a)`` ``[B]`` of an observation ``[B, O]`` and an action vector ``[B, A]``."""

    def __init__(self, observ_size: int, action_size: int, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp(observ_size + action_size, hidden, 1)

    def forward(self, observ: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observ, action], dim=-1)).squeeze(-1)


class DiscreteQNetwork(nn.Module):
    """``Q(s, .)`` ``[B, A]``: the value of every action at once."""

    def __init__(self, observ_size: int, actions: int, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp(observ_size, hidden, actions)

    def forward(self, observ: torch.Tensor) -> torch.Tensor:
        return self.net(observ)
