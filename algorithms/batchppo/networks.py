"""BatchPPO networks: a policy (MLP torso, optional GRU, Gaussian or categorical head) and a
separate value MLP, as in batch-ppo's ``feed_forward_gaussian`` / ``recurrent_gaussian`` /
``feed_forward_categorical`` (batch-ppo v1.4; docs/batchppo.md).

A policy maps observations to a flat *parameter* tensor ``[..., P]`` that fully describes the
action distribution: ``cat(mean, std)`` for the Gaussian head, the logits for the categorical
head. BatchPPO stores these parameters per step (the behaviour policy) and hands them back to
the head's ``log_prob`` / ``kl`` / ``entropy`` at update time.

    >>> policy = Policy(3, GaussianHead(100, 1, init_std=0.35, init_output_factor=0.1),
    ...                 layers=(200, 100), recurrent=False)
    >>> params, _ = policy.step(torch.zeros(5, 3), None)
    >>> policy.head.sample(params, None).shape
    torch.Size([5, 1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CategoricalHead",
    "GaussianHead",
    "Policy",
    "categorical_kl",
    "diag_normal_kl",
    "value_network",
]

_LOG_2PI = math.log(2 * math.pi)


def diag_normal_kl(
    mean0: torch.Tensor, std0: torch.Tensor, mean1: torch.Tensor, std1: torch.Tensor
) -> torch.Tensor:
    """KL(N(mean0, std0²) || N(mean1, std1²)) of diagonal Gaussians, summed over the last axis.

    >>> diag_normal_kl(torch.zeros(2), torch.ones(2), torch.zeros(2), torch.ones(2))
    tensor(0.)
    """
    ratio = (std0 / std1).square()
    term = ((mean0 - mean1) / std1).square()
    return 0.5 * (ratio + term - 1 - torch.log(ratio)).sum(-1)


def categorical_kl(logits0: torch.Tensor, logits1: torch.Tensor) -> torch.Tensor:
    """KL(Cat(logits0) || Cat(logits1)) over the last axis."""
    log_p0 = F.log_softmax(logits0, -1)
    log_p1 = F.log_softmax(logits1, -1)
    return (log_p0.exp() * (log_p0 - log_p1)).sum(-1)


class GaussianHead(nn.Module):
    """Diagonal Gaussian: ``mean = tanh(linear(x))``, ``std = softplus(param)`` (state-independent).

    The mean layer starts from variance-scaled weights (``var = init_output_factor / fan_in``,
    TF's ``variance_scaling_initializer(factor)``) and zero bias; ``softplus(param)`` starts at
    ``init_std``. Parameters: ``[..., 2 * action_size]`` = ``cat(mean, std)``.
    """

    def __init__(
        self,
        features: int,
        action_size: int,
        init_std: float,
        init_output_factor: float,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.action_size = action_size
        self.param_size = 2 * action_size
        self.mean = nn.Linear(features, action_size)
        _variance_scaling(self.mean, init_output_factor, generator)
        self.std_param = nn.Parameter(torch.full((action_size,), math.log(math.expm1(init_std))))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        mean = torch.tanh(self.mean(features))
        std = F.softplus(self.std_param).expand_as(mean)
        return torch.cat((mean, std), -1)

    def split(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)``, each ``[..., action_size]``."""
        return params[..., : self.action_size], params[..., self.action_size :]

    def sample(self, params: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        mean, std = self.split(params)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + std * noise

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        return self.split(params)[0]

    def log_prob(self, params: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        mean, std = self.split(params)
        z = (action - mean) / std
        return (-0.5 * z.square() - torch.log(std) - 0.5 * _LOG_2PI).sum(-1)

    def kl(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return diag_normal_kl(*self.split(old), *self.split(new))

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        std = self.split(params)[1]
        return (0.5 + 0.5 * _LOG_2PI + torch.log(std)).sum(-1)


class CategoricalHead(nn.Module):
    """Categorical over ``num_actions`` choices; parameters are the logits ``[..., n]``.

    Actions are 0-based int64 indices (BatchPPO adds a Discrete space's ``start``).
    """

    def __init__(
        self,
        features: int,
        num_actions: int,
        init_output_factor: float,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.param_size = num_actions
        self.logits = nn.Linear(features, num_actions)
        _variance_scaling(self.logits, init_output_factor, generator)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.logits(features)

    def sample(self, params: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        probs = F.softmax(params, -1).reshape(-1, params.shape[-1])
        return torch.multinomial(probs, 1, generator=generator).reshape(params.shape[:-1])

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        return params.argmax(-1)

    def log_prob(self, params: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(params, -1)
        return log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def kl(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return categorical_kl(old, new)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(params, -1)
        return -(log_p.exp() * log_p).sum(-1)


Head = GaussianHead | CategoricalHead


class Policy(nn.Module):
    """ReLU MLP torso, optionally a GRU as the last layer, then a distribution head.

    Args:
        observ_size: size of a flattened observation.
        head: the distribution head; its input size is the torso's last layer size.
        layers: hidden sizes; with ``recurrent`` the last one is the GRU's size.
        recurrent: use a GRU (state per batch row, see :meth:`step`) as the last layer.
        generator: CPU generator for the initial weights (None: torch's global one).
    """

    def __init__(
        self,
        observ_size: int,
        head: Head,
        layers: Sequence[int],
        recurrent: bool,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        dense = list(layers[:-1]) if recurrent else list(layers)
        self.torso = _mlp(observ_size, dense, generator)
        features = dense[-1] if dense else observ_size
        self.gru = None
        if recurrent:
            self.gru = nn.GRU(features, layers[-1], batch_first=True)
            bound = 1 / math.sqrt(layers[-1])
            for weight in self.gru.parameters():
                nn.init.uniform_(weight, -bound, bound, generator=generator)
        self.head = head

    @property
    def state_size(self) -> int:
        """Size of the recurrent state per row (0 for a feed-forward policy)."""
        return 0 if self.gru is None else self.gru.hidden_size

    def step(
        self, observ: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step: ``observ [B, O]``, ``state [B, H]`` (or None) -> ``(params [B, P], state)``."""
        features = self.torso(observ)
        if self.gru is not None:
            out, hidden = self.gru(features.unsqueeze(1), state.unsqueeze(0).contiguous())
            features, state = out.squeeze(1), hidden.squeeze(0)
        return self.head(features), state

    def sequence(self, observ: torch.Tensor, chunk_length: int | None = None) -> torch.Tensor:
        """Whole episodes from their first step: ``observ [N, T, O]`` -> ``params [N, T, P]``.

        The GRU starts from zeros (``begin_episodes`` zeroes it too), so replaying an episode
        reproduces the parameters ``step`` gave while acting. Padding frames come after the
        valid ones and cannot change them. ``chunk_length`` truncates backprop through time
        (the state is carried across chunks, its gradient is not).
        """
        features = self.torso(observ)
        if self.gru is not None:
            length = features.shape[1]
            chunk = chunk_length or length
            hidden = features.new_zeros(1, features.shape[0], self.gru.hidden_size)
            outputs = []
            for start in range(0, length, chunk):
                out, hidden = self.gru(features[:, start : start + chunk], hidden)
                outputs.append(out)
                hidden = hidden.detach()
            features = torch.cat(outputs, 1)
        return self.head(features)


def value_network(
    observ_size: int, layers: Sequence[int], generator: torch.Generator | None = None
) -> nn.Sequential:
    """ReLU MLP ``[..., O] -> [..., 1]`` (the state value, separate from the policy)."""
    torso = _mlp(observ_size, layers, generator)
    out = nn.Linear(layers[-1] if layers else observ_size, 1)
    _glorot(out, generator)
    return nn.Sequential(*torso, out)


def _mlp(size: int, layers: Sequence[int], generator: torch.Generator | None) -> nn.Sequential:
    modules: list[nn.Module] = []
    for width in layers:
        linear = nn.Linear(size, width)
        _glorot(linear, generator)
        modules += [linear, nn.ReLU()]
        size = width
    return nn.Sequential(*modules)


def _glorot(linear: nn.Linear, generator: torch.Generator | None) -> None:
    """TF's ``fully_connected`` default: Glorot-uniform weights, zero bias."""
    nn.init.xavier_uniform_(linear.weight, generator=generator)
    nn.init.zeros_(linear.bias)


def _variance_scaling(linear: nn.Linear, factor: float, generator: torch.Generator | None) -> None:
    """Truncated-normal weights with ``var = factor / fan_in`` (cut at 2 std), zero bias."""
    std = math.sqrt(factor / linear.in_features)
    nn.init.trunc_normal_(linear.weight, 0.0, std, -2 * std, 2 * std, generator=generator)
    nn.init.zeros_(linear.bias)
