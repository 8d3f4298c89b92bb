"""The actor-critic of K independent agents as one flat parameter tensor ``[K, P]``.

PureJaxRL's ``ActorCritic``: separate actor and critic MLPs (two hidden layers, tanh),
orthogonal initialisation with gain sqrt(2) on hidden layers, 0.01 on the policy output and
1.0 on the value output, zero biases; a Gaussian policy has a state-independent log std.
``init="lecun"`` draws every weight as flax's ``nn.Dense`` does by default (a normal
truncated at two standard deviations, rescaled to variance 1/fan_in), and ``bias_init=b``
draws biases from U[0, b), as gymnax-blines' networks do (b = 0.05).

All K agents' weights live in one tensor, so one ``baddbmm`` runs every agent's layer and
the optimiser is one elementwise program over ``[K, P]``. Agent k's slice is initialised from
its own seed only, so agent k of a K-agent run starts exactly as a lone run with that seed.

    >>> net = ActorCritic(obs_dim=4, action_dim=2, discrete=True, hidden=64)
    >>> params = net.init([0, 1])
    >>> logits, value = net(params, torch.zeros(2, 5, 4))
    >>> logits.shape, value.shape
    (torch.Size([2, 5, 2]), torch.Size([2, 5]))
"""

from __future__ import annotations

import math

import torch

#: The parameters in either form: flat ``[K, P]``, or :meth:`ActorCritic.split`'s views.
Params = torch.Tensor | dict[str, torch.Tensor]


class ActorCritic:
    """Layout, initialisation and forward pass of the stacked actor-critic (stateless)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        discrete: bool,
        hidden: int = 64,
        activation: str = "tanh",
        init_log_std: float = 0.0,
        init: str = "orthogonal",
        bias_init: float = 0.0,
    ):
        self.obs_dim, self.action_dim, self.discrete = obs_dim, action_dim, discrete
        self.activation = torch.tanh if activation == "tanh" else torch.relu
        self.init_log_std = init_log_std
        self.weight_init, self.bias_init = init, bias_init
        # (name, shape, init gain or None for zeros); actor first, then critic.
        self.layers: list[tuple[str, tuple[int, ...], float | None]] = []
        for head, out_dim, out_gain in (("actor", action_dim, 0.01), ("critic", 1, 1.0)):
            sizes = (obs_dim, hidden, hidden, out_dim)
            for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
                gain = out_gain if i == 2 else math.sqrt(2.0)
                self.layers.append((f"{head}{i}.weight", (n_in, n_out), gain))
                self.layers.append((f"{head}{i}.bias", (n_out,), None))
        if not discrete:
            self.layers.append(("log_std", (action_dim,), None))
        self.offsets: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        start = 0
        for name, shape, _ in self.layers:
            size = math.prod(shape)
            self.offsets[name] = (start, start + size, shape)
            start += size
        self.num_params = start

    def init(self, seeds: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
        """``[K, P]`` float32 parameters; agent k drawn from a generator seeded ``seeds[k]``."""
        rows = []
        for seed in seeds:
            generator = torch.Generator().manual_seed(int(seed))
            parts = []
            for name, shape, gain in self.layers:
                if name == "log_std":
                    value = torch.full(shape, float(self.init_log_std))
                elif gain is None:
                    value = torch.zeros(shape)
                    if self.bias_init:
                        value.uniform_(0.0, self.bias_init, generator=generator)
                elif self.weight_init == "lecun":
                    value = _lecun_normal(shape, generator)
                else:
                    value = torch.empty(shape[::-1])
                    torch.nn.init.orthogonal_(value, gain=gain, generator=generator)
                    value = value.t()  # stored [in, out]
                parts.append(value.reshape(-1))
            rows.append(torch.cat(parts))
        return torch.stack(rows).to(device)

    def view(self, params: Params, name: str) -> torch.Tensor:
        """Agent-batched view ``[K, *shape]`` of parameter ``name`` (``params`` flat, or
        :meth:`split`)."""
        if isinstance(params, dict):
            return params[name]
        start, end, shape = self.offsets[name]
        return params[:, start:end].reshape(params.shape[0], *shape)

    def split(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every parameter's view ``{name: [K, *shape]}``; the forward pass takes either form.

        Differentiate with respect to the split form and :meth:`join` the gradients: the
        gradient of the flat tensor through its slices compiles to one masked select per
        parameter for every element (a 9k-parameter Adam step took 96 us that way).
        """
        return {name: self.view(params, name) for name, _, _ in self.layers}

    def join(self, pieces: dict[str, torch.Tensor]) -> torch.Tensor:
        """The flat ``[K, P]`` tensor of :meth:`split`'s form (for gradients)."""
        return torch.cat([pieces[name].flatten(1) for name, _, _ in self.layers], 1)

    def _mlp(self, params: Params, head: str, x: torch.Tensor) -> torch.Tensor:
        for i in range(3):
            weight = self.view(params, f"{head}{i}.weight")
            bias = self.view(params, f"{head}{i}.bias")
            x = _linear(x, weight, bias)
            if i < 2:
                x = self.activation(x)
        return x

    def __call__(self, params: Params, observ: torch.Tensor) -> tuple:
        """``observ [K, M, obs_dim]`` -> ``(logits or mean [K, M, A], value [K, M])``."""
        return self._mlp(params, "actor", observ), self._mlp(params, "critic", observ)[..., 0]

    def value(self, params: Params, observ: torch.Tensor) -> torch.Tensor:
        return self._mlp(params, "critic", observ)[..., 0]

    def log_std(self, params: Params) -> torch.Tensor:
        """``[K, 1, A]`` (Gaussian head only)."""
        return self.view(params, "log_std")[:, None, :]


#: The standard deviation of a unit normal truncated to [-2, 2] (flax's truncated_normal
#: initialisers divide by it so that the variance is the one asked for).
_TRUNCATED_STD = 0.87962566103423978


def _lecun_normal(shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """A ``[in, out]`` weight as flax's default kernel init: variance 1/in, truncated at
    two standard deviations."""
    std = math.sqrt(1.0 / shape[0]) / _TRUNCATED_STD
    value = torch.empty(shape)
    torch.nn.init.trunc_normal_(value, 0.0, std, -2.0 * std, 2.0 * std, generator=generator)
    return value


#: Rows per agent up to which a layer is a fused multiply-and-sum instead of a matmul call.
SMALL_BATCH = 16
#: Outputs up to which a minibatch layer is computed transposed (see _linear).
THIN_LAYER = 8


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x [K, M, in] @ weight [K, in, out] + bias [K, out]`` for every agent at once.

    A rollout step has a few rows per agent (4 in PureJaxRL's CartPole): there a library
    matmul call costs ~3 us of dispatch for ~1k multiply-adds, so the layer is written as a
    broadcast product and a sum, which torch.compile fuses with the bias and the activation
    into one loop. Minibatches (hundreds of rows) use ``baddbmm``.

    A layer with a few outputs (a policy or value head) is computed transposed, as
    ``(weight^T @ x^T)^T``. On a CPU the library's product of ``[128, 64] @ [64, 2]`` took
    ~10 us (as long as a 64-wide layer) against ~4-7 us transposed, and autograd then forms the
    weight's gradient as ``g^T @ x`` (~4 us) instead of ``x^T @ g`` (~13 us): PPO's CartPole
    update ~8% faster (benchmarks/RESULTS.md). The sums are the same; only their order
    may differ, within float rounding.
    """
    if x.shape[1] <= SMALL_BATCH:
        return (x[:, :, :, None] * weight[:, None, :, :]).sum(2) + bias[:, None, :]
    if weight.shape[2] <= THIN_LAYER:
        product = torch.baddbmm(bias[:, :, None], weight.transpose(1, 2), x.transpose(1, 2))
        return product.transpose(1, 2)
    return torch.baddbmm(bias[:, None, :], x, weight)
