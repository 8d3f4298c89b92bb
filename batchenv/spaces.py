"""Batched arrays for Gymnasium spaces: buffers, row writers and action checks.

A space is seen as a nest (Tuple -> tuple, Dict -> dict) of leaf spaces (Box, Discrete,
MultiDiscrete, MultiBinary). A batch of values is the same nest of NumPy arrays with a
leading batch axis. Everything here is plain NumPy: worker processes import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

Nest = Any


def leaves(space: spaces.Space) -> list[spaces.Space]:
    """Leaf spaces of ``space`` in a fixed order (Dict keys in the space's own order)."""
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in leaves(sub)]
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in leaves(sub)]
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return [space]
    raise TypeError(
        f"batchenv cannot batch a {type(space).__name__} space; supported: Box, Discrete, "
        "MultiDiscrete, MultiBinary and Tuple/Dict nests of them"
    )


def leaf_layout(space: spaces.Space) -> tuple[tuple[int, ...], np.dtype]:
    """Shape of one value of a leaf space and the dtype its batch is stored in."""
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(np.int64)
    return tuple(space.shape), np.dtype(space.dtype)


def flatten(space: spaces.Space, value: Nest) -> list[Any]:
    """The leaves of ``value``, a nest shaped like ``space``."""
    if isinstance(space, spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
            raise ValueError(
                f"expected a tuple of {len(space.spaces)} parts, got {_describe(value)}"
            )
        return [x for sub, v in zip(space.spaces, value) for x in flatten(sub, v)]
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            keys = sorted(space.spaces)
            raise ValueError(f"expected a dict with keys {keys}, got {_describe(value)}")
        return [x for key, sub in space.spaces.items() for x in flatten(sub, value[key])]
    return [value]


def unflatten(space: spaces.Space, values: Sequence[Any]) -> Nest:
    """Inverse of :func:`flatten`."""
    iterator = iter(values)

    def build(sub: spaces.Space) -> Nest:
        if isinstance(sub, spaces.Tuple):
            return tuple(build(s) for s in sub.spaces)
        if isinstance(sub, spaces.Dict):
            return {key: build(s) for key, s in sub.spaces.items()}
        return next(iterator)

    return build(space)


def unflattener(space: spaces.Space) -> Callable[[Sequence[Any]], Nest]:
    """:func:`unflatten` for ``space``, decided once: a single leaf is ``values[0]``.

    The hot paths of BatchEnv call it on every step and reset; deciding the nesting there
    costs a few slow ``isinstance`` checks (Gymnasium's Tuple space is an ABC) each time."""
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        return lambda values: unflatten(space, values)
    return lambda values: values[0]


def allocate(
    space: spaces.Space,
    batch_size: int,
    alloc: Callable[[tuple, np.dtype], np.ndarray] | None = None,
) -> list[np.ndarray]:
    """One array ``[batch_size, *leaf_shape]`` per leaf, made by ``alloc(shape, dtype)``."""
    alloc = alloc or (lambda shape, dtype: np.zeros(shape, dtype))
    result = []
    for leaf in leaves(space):
        shape, dtype = leaf_layout(leaf)
        result.append(alloc((batch_size, *shape), dtype))
    return result


def make_row_writer(space: spaces.Space, buffers: list[np.ndarray]) -> Callable[[int, Nest], None]:
    """A function ``write(row, value)`` that stores one value of ``space`` into ``buffers``.

    The value's shape is checked against the space: a silently broadcast observation is
    lost data, so a mismatch raises ValueError saying what was expected. Leaves with integer
    buffers (Discrete, MultiDiscrete, MultiBinary) also refuse values that would be cast
    (a float 7.9 into an int) and, for Discrete, values outside ``[start, start + n)``;
    float (Box) leaves pay for nothing but the shape check.
    """
    leaf_spaces = leaves(space)
    layouts = [leaf_layout(leaf) for leaf in leaf_spaces]
    checks = [_integer_check(leaf, buffer) for leaf, buffer in zip(leaf_spaces, buffers)]
    if len(leaf_spaces) == 1:
        shape = layouts[0][0]
        buffer = buffers[0]
        check = checks[0]

        def write_one(row: int, value: Any) -> None:
            if getattr(value, "shape", None) != shape and np.shape(value) != shape:
                raise ValueError(
                    f"observation has shape {np.shape(value)} but the observation space "
                    f"{space} expects {shape}"
                )
            if check is not None:
                check(value)
            buffer[row] = value

        return write_one

    def write_nest(row: int, value: Any) -> None:
        for leaf, (shape, _), buffer, check, part in zip(
            leaf_spaces, layouts, buffers, checks, flatten(space, value)
        ):
            if np.shape(part) != shape:
                raise ValueError(
                    f"observation part has shape {np.shape(part)} but the space {leaf} "
                    f"expects {shape}"
                )
            if check is not None:
                check(part)
            buffer[row] = part

    return write_nest


def _integer_check(leaf: spaces.Space, buffer: np.ndarray) -> Callable[[Any], None] | None:
    """For an integer buffer: a check that a value is integral (and in a Discrete's range)."""
    if buffer.dtype.kind not in "iub":
        return None
    low = high = None
    if isinstance(leaf, spaces.Discrete):
        low, high = int(leaf.start), int(leaf.start) + int(leaf.n) - 1

    def check(value: Any) -> None:
        array = np.asarray(value)
        if not np.can_cast(array.dtype, buffer.dtype, "same_kind"):
            raise ValueError(
                f"observation {value!r} has dtype {array.dtype}, but the space {leaf} holds "
                f"{buffer.dtype} values; it would be cast, losing data"
            )
        if low is not None and not low <= int(array) <= high:
            raise ValueError(f"observation {value!r} is outside the space {leaf} ([{low}, {high}])")

    return check


def make_row_reader(space: spaces.Space, buffers: list[np.ndarray]) -> Callable[[int], Nest]:
    """A function ``read(row)`` giving the action for one env, ready to pass to ``step``."""
    leaf_spaces = leaves(space)
    readers = []
    for leaf, buffer in zip(leaf_spaces, buffers):
        if isinstance(leaf, spaces.Discrete):
            readers.append(lambda row, b=buffer: int(b[row]))
        else:
            readers.append(lambda row, b=buffer: b[row].copy())
    if len(readers) == 1 and not isinstance(space, (spaces.Tuple, spaces.Dict)):
        return readers[0]
    return lambda row: unflatten(space, [read(row) for read in readers])


def make_rows_reader(
    space: spaces.Space, buffers: list[np.ndarray]
) -> Callable[[np.ndarray], list]:
    """A function ``read(rows)`` giving the list of actions for those rows (one NumPy call
    for a single Discrete or Box leaf). Discrete actions are NumPy integer scalars, as
    Gymnasium's SyncVectorEnv passes them (``Discrete.contains`` checks those ~25% faster
    than Python ints, and CartPole-like envs call it on every step)."""
    if not isinstance(space, (spaces.Tuple, spaces.Dict)):
        buffer = buffers[0]
        return lambda rows: list(buffer[rows])
    read_row = make_row_reader(space, buffers)
    return lambda rows: [read_row(row) for row in rows]


def check_actions(
    space: spaces.Space, actions: Nest, batch_size: int, check_values: bool = True
) -> list[np.ndarray]:
    """Validate a batch of actions against ``space``; return the leaves as arrays.

    Raises TypeError for a wrong dtype kind and ValueError for a wrong batch size or shape,
    a non-finite value or a value outside the space, naming the first offending row.
    """
    try:
        parts = flatten(space, actions)
    except ValueError as error:
        raise ValueError(f"action batch does not match the action space {space}: {error}") from None
    result = []
    for leaf, part in zip(leaves(space), parts):
        shape, dtype = leaf_layout(leaf)
        array = np.asarray(part)
        if array.shape != (batch_size, *shape):
            raise ValueError(
                f"action batch has shape {array.shape}, expected {(batch_size, *shape)} "
                f"({batch_size} envs x action space {leaf})"
            )
        _check_dtype(leaf, array)
        if check_values:
            _check_values(leaf, array)
        result.append(array)
    return result


def action_checker(
    space: spaces.Space, batch_size: int
) -> Callable[[Nest, bool], list[np.ndarray]]:
    """:func:`check_actions` for ``space`` and ``batch_size``, planned once:
    ``check(actions, check_values)``.

    For a single leaf (most envs) the check is a shape comparison, a dtype lookup and, for
    the values, one or two whole-array reductions; only a batch that fails them goes through
    :func:`check_actions`, which names what is wrong. Nests take :func:`check_actions`.
    """
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        return lambda actions, check_values: check_actions(space, actions, batch_size, check_values)
    shape, _ = leaf_layout(space)
    batch_shape = (batch_size, *shape)
    good_dtypes: set[np.dtype] = set()  # dtypes that passed _check_dtype
    in_range = _in_range(space)

    def check(actions: Nest, check_values: bool) -> list[np.ndarray]:
        array = actions if type(actions) is np.ndarray else np.asarray(actions)
        if (
            array.shape != batch_shape
            or array.dtype not in good_dtypes
            or (check_values and not in_range(array))
        ):
            result = check_actions(space, array, batch_size, check_values)  # raises, or
            good_dtypes.add(array.dtype)  # a dtype seen for the first time passed
            return result
        return [array]

    return check


def _in_range(leaf: spaces.Space) -> Callable[[np.ndarray], bool]:
    """True when a correctly shaped batch lies inside ``leaf`` (and is finite)."""
    if isinstance(leaf, spaces.Box):
        low, high = leaf.low.reshape(-1), leaf.high.reshape(-1)

        def box(array: np.ndarray) -> bool:
            flat = array.reshape(len(array), -1)
            # NaN fails ``>=``; infinities inside an unbounded box fail isfinite.
            if not ((flat >= low).all() and (flat <= high).all()):
                return False
            return array.dtype.kind != "f" or bool(np.isfinite(flat).all())

        return box
    if isinstance(leaf, spaces.Discrete):
        start, end = int(leaf.start), int(leaf.start) + int(leaf.n)
        return lambda array: array.size == 0 or (array.min() >= start and array.max() < end)
    if isinstance(leaf, spaces.MultiDiscrete):
        low = leaf.start.reshape(-1)
        high = (leaf.start + leaf.nvec).reshape(-1)

        def multi(array: np.ndarray) -> bool:
            flat = array.reshape(len(array), -1)
            return bool((flat >= low).all() and (flat < high).all())

        return multi
    return lambda array: bool(((array == 0) | (array == 1)).all())  # MultiBinary


def _check_dtype(leaf: spaces.Space, array: np.ndarray) -> None:
    if isinstance(leaf, spaces.Box):
        ok = (
            array.dtype.kind in "fiub"
            if np.issubdtype(leaf.dtype, np.floating)
            else array.dtype.kind in "iub"
        )
    else:
        ok = array.dtype.kind in "iub"
    if not ok:
        raise TypeError(
            f"action batch has dtype {array.dtype}, but the action space {leaf} needs "
            f"{'numbers' if isinstance(leaf, spaces.Box) else 'integers'}"
        )


def _check_values(leaf: spaces.Space, array: np.ndarray) -> None:
    if isinstance(leaf, spaces.Box):
        flat = array.reshape(len(array), -1)
        low, high = leaf.low.reshape(1, -1), leaf.high.reshape(1, -1)
        # The usual case in four whole-array operations (NaN fails ``>=``); only a batch
        # that fails them is searched for the row to name.
        if (flat >= low).all() and (flat <= high).all():
            if array.dtype.kind != "f" or np.isfinite(flat).all():
                return
        if array.dtype.kind == "f":
            bad = ~np.isfinite(flat).all(axis=1)
            if bad.any():
                row = int(np.argmax(bad))
                raise ValueError(f"action for env {row} is not finite: {array[row]!r}")
        bad = ((flat < low) | (flat > high)).any(axis=1)
    elif isinstance(leaf, spaces.Discrete):
        bad = (array < leaf.start) | (array >= leaf.start + leaf.n)
    elif isinstance(leaf, spaces.MultiDiscrete):
        flat = array.reshape(len(array), -1)
        bad = (
            (flat < leaf.start.reshape(-1)) | (flat >= (leaf.start + leaf.nvec).reshape(-1))
        ).any(1)
    else:  # MultiBinary
        bad = ((array != 0) & (array != 1)).reshape(len(array), -1).any(axis=1)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"action for env {row} is outside the action space {leaf}: {array[row]!r}")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(value)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"
