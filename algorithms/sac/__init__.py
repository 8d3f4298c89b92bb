"""SAC (Soft Actor-Critic) for batchenv: Box actions and two discrete-action variants.

    >>> from batchenv.algorithms.sac import PRESETS, SAC, train
    >>> config = PRESETS["pendulum"].replace(env="batchenv.kernels:Pendulum")
    >>> scores = train(config, logdir="runs/sac-pendulum")   # eval scores, one per round

Modules: ``config`` (SACConfig, PRESETS), ``networks`` (tanh-Gaussian and categorical
policies, Q networks), ``losses`` (soft Q targets, policy, temperature and Polyak updates),
``algorithm`` (the SAC class on the four methods, learning from
:class:`batchenv.algorithms.replay.ReplayMemory`), ``train`` (the training loop: ``train()``,
``evaluate()``), ``cli`` (``batchenv train sac`` / ``batchenv evaluate``), ``session``
(``algorithm: sac`` in ``batchenv run`` specs). docs/sac.md describes the variants.
"""

from .algorithm import SAC, target_entropy
from .config import PRESETS, SACConfig, field_help, parse_overrides
from .train import evaluate, train

__all__ = [
    "PRESETS",
    "SAC",
    "SACConfig",
    "evaluate",
    "field_help",
    "parse_overrides",
    "target_entropy",
    "train",
]
