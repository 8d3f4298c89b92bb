"""Batched arrays for Gymnasium spaces: buffers, row writers and action checks.

A space is seen as a nest (Tuple -> tuple, Dict -> dict) of leaf spaces (Box, Discrete,
MultiDiscrete, MultiBinary, Text). A batch of values is the same nest of NumPy arrays with
a leading batch axis. Everything here is plain NumPy: worker processes import it.

Text and OneOf are laid out as Gymnasium's shared-memory ``AsyncVectorEnv`` lays them out:
a Text value is stored as its ``max_length`` int32 character indices (padded with
``len(character_set)``) and a batch of them reads back as a tuple of strings; a OneOf is
its index (a ``Discrete(len(spaces))`` leaf) followed by the leaves of every subspace, only
the chosen one written, and a batch reads back as a tuple of ``(index, value)`` pairs.
Graph and Sequence have no static shape and custom spaces no layout: they raise
:class:`~batchenv.errors.UnsupportedSpaceError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from batchenv.errors import UnsupportedSpaceError

Nest = Any
PLAIN_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def leaves(space: spaces.Space) -> list[spaces.Space]:
    """Leaf spaces of ``space`` in a fixed order (Dict keys in the space's own order)."""
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in leaves(sub)]
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in leaves(sub)]
    if isinstance(space, spaces.OneOf):
        index = spaces.Discrete(len(space.spaces))
        return [index] + [leaf for sub in space.spaces for leaf in leaves(sub)]
    if isinstance(space, (*PLAIN_LEAVES, spaces.Text)):
        return [space]
    supported = "Box, Discrete, MultiDiscrete, MultiBinary, Text and Tuple/Dict/OneOf nests"
    if isinstance(space, (spaces.Graph, spaces.Sequence)):
        raise UnsupportedSpaceError(
            f"batchenv cannot batch {space}: it has a dynamic shape so its not possible to "
            f"make a static shared memory. Use spaces of fixed shape ({supported})"
        )
    raise UnsupportedSpaceError(
        f"batchenv cannot batch a {type(space).__name__} space: it has no shared-memory "
        f"layout; use {supported}"
    )


def is_plain(space: spaces.Space) -> bool:
    """True for a single leaf stored as it is (not a nest, not Text, not OneOf)."""
    return isinstance(space, PLAIN_LEAVES)


def leaf_layout(space: spaces.Space) -> tuple[tuple[int, ...], np.dtype]:
    """Shape of one value of a leaf space and the dtype its batch is stored in."""
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(space.dtype)
    if isinstance(space, spaces.Text):
        return (space.max_length,), np.dtype(np.int32)
    return tuple(space.shape), np.dtype(space.dtype)


def flatten(space: spaces.Space, value: Nest) -> list[Any]:
    """The leaves of ``value``, one value of ``space`` (Text encoded; None for the leaves
    of a OneOf's subspaces that were not chosen)."""
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
    if isinstance(space, spaces.Text):
        return [_encode_text(space, value)]
    if isinstance(space, spaces.OneOf):
        chosen, part = _one_of_value(space, value)
        result: list[Any] = [chosen]
        for k, sub in enumerate(space.spaces):
            result += flatten(sub, part) if k == chosen else [None] * len(leaves(sub))
        return result
    return [value]


def flatten_batch(space: spaces.Space, batch: Nest, batch_size: int) -> list[Any]:
    """The leaves of a batch of ``batch_size`` values of ``space``, as Gymnasium batches
    them (a Text batch is a sequence of strings, a OneOf batch one of ``(index, value)``
    pairs); the other leaves are passed through as given."""
    if isinstance(space, spaces.Tuple):
        if not isinstance(batch, (tuple, list)) or len(batch) != len(space.spaces):
            raise ValueError(
                f"expected a tuple of {len(space.spaces)} parts, got {_describe(batch)}"
            )
        return [x for s, b in zip(space.spaces, batch) for x in flatten_batch(s, b, batch_size)]
    if isinstance(space, spaces.Dict):
        if not isinstance(batch, dict) or set(batch) != set(space.spaces):
            keys = sorted(space.spaces)
            raise ValueError(f"expected a dict with keys {keys}, got {_describe(batch)}")
        return [
            x for key, s in space.spaces.items() for x in flatten_batch(s, batch[key], batch_size)
        ]
    if isinstance(space, (spaces.Text, spaces.OneOf)):
        rows = list(batch) if isinstance(batch, (tuple, list)) else [batch]
        if len(rows) != batch_size:
            raise ValueError(f"expected {batch_size} values of {space}, got {_describe(batch)}")
        columns = [flatten(space, row) for row in rows]
        fillers = [_filler(leaf) for leaf in leaves(space)]
        return [
            np.stack([fill if col[k] is None else np.asarray(col[k]) for col in columns])
            for k, fill in enumerate(fillers)
        ]
    return [batch]


def unflatten(space: spaces.Space, values: Sequence[Any], batch: bool = False) -> Nest:
    """Inverse of :func:`flatten` (``batch=False``) or of :func:`flatten_batch` for arrays
    with a leading batch axis (``batch=True``: Text and OneOf read back as tuples)."""
    iterator = iter(values)

    def build(sub: spaces.Space) -> Nest:
        if isinstance(sub, spaces.Tuple):
            return tuple(build(s) for s in sub.spaces)
        if isinstance(sub, spaces.Dict):
            return {key: build(s) for key, s in sub.spaces.items()}
        if isinstance(sub, spaces.Text):
            value = next(iterator)
            return tuple(_decode_text(sub, v) for v in value) if batch else _decode_text(sub, value)
        if isinstance(sub, spaces.OneOf):
            chosen = next(iterator)
            parts = [build(s) for s in sub.spaces]
            if not batch:
                return int(chosen), parts[int(chosen)]
            return tuple(
                (int(k), _row(sub.spaces[int(k)], parts[int(k)], row))
                for row, k in enumerate(chosen)
            )
        return next(iterator)

    return build(space)


def unflattener(space: spaces.Space) -> Callable[[Sequence[Any]], Nest]:
    """:func:`unflatten` of a batch for ``space``, decided once: a single leaf is
    ``values[0]``.

    The hot paths of BatchEnv call it on every step and reset; deciding the nesting there
    costs a few slow ``isinstance`` checks (Gymnasium's Tuple space is an ABC) each time."""
    if not is_plain(space):
        return lambda values: unflatten(space, values, batch=True)
    return lambda values: values[0]


def _encode_text(space: spaces.Text, value: Any) -> np.ndarray:
    if not isinstance(value, str):
        raise ValueError(f"expected a string for the space {space}, got {_describe(value)}")
    if not space.contains(value):
        raise ValueError(f"string {value!r} is outside the space {space}")
    return np.asarray(spaces.flatten(space, value), dtype=np.int32)


def _decode_text(space: spaces.Text, value: np.ndarray) -> str:
    size = len(space.character_set)
    return "".join(space.character_list[int(v)] for v in value if v < size)


def _one_of_value(space: spaces.OneOf, value: Any) -> tuple[int, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"expected an (index, value) pair for {space}, got {_describe(value)}")
    chosen = int(value[0])
    if not 0 <= chosen < len(space.spaces):
        raise ValueError(f"OneOf index {chosen} is outside [0, {len(space.spaces)})")
    return chosen, value[1]


def _row(space: spaces.Space, batch: Nest, row: int) -> Nest:
    """Row ``row`` of a batch of ``space`` values, as read back by :func:`unflatten`."""
    if isinstance(space, spaces.Tuple):
        return tuple(_row(s, b, row) for s, b in zip(space.spaces, batch))
    if isinstance(space, spaces.Dict):
        return {key: _row(s, batch[key], row) for key, s in space.spaces.items()}
    return batch[row]


def _filler(leaf: spaces.Space) -> np.ndarray:
    """A value of ``leaf``'s layout inside it, for the rows of a OneOf that chose another
    subspace (never read; it only has to pass the checks)."""
    shape, dtype = leaf_layout(leaf)
    if isinstance(leaf, spaces.Box):
        return np.clip(np.zeros(shape), leaf.low, leaf.high).astype(dtype)
    if isinstance(leaf, spaces.Discrete):
        return np.asarray(leaf.start, dtype)
    if isinstance(leaf, spaces.MultiDiscrete):
        return np.asarray(leaf.start, dtype)
    if isinstance(leaf, spaces.Text):
        return _encode_text(leaf, leaf.character_list[0] * leaf.min_length)
    return np.zeros(shape, dtype)


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
    if is_plain(space):
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
            if part is None:  # a OneOf's subspace that was not chosen
                continue
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
    if is_plain(space):
        return readers[0]
    return lambda row: unflatten(space, [read(row) for read in readers])


def make_rows_reader(
    space: spaces.Space, buffers: list[np.ndarray]
) -> Callable[[np.ndarray], list]:
    """A function ``read(rows)`` giving the list of actions for those rows (one NumPy call
    for a single Discrete or Box leaf). Discrete actions are NumPy integer scalars, as
    Gymnasium's SyncVectorEnv passes them (``Discrete.contains`` checks those ~25% faster
    than Python ints, and CartPole-like envs call it on every step)."""
    if is_plain(space):
        buffer = buffers[0]
        if isinstance(space, spaces.Box) and space.shape == () and buffer.dtype.kind == "f":
            # Python floats, as Gymnasium passes the float64 scalars of a user's array:
            # NumPy's float32 scalars are not floats (``time.sleep`` refuses them).
            return lambda rows: buffer[rows].tolist()
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
        parts = flatten_batch(space, actions, batch_size)
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
    if not is_plain(space):
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


def check_rows(space: spaces.Space, arrays: list[np.ndarray], rows: np.ndarray) -> None:
    """Check the values of the batch rows selected by the bool mask ``rows`` of the leaf
    ``arrays`` of a batch of actions (already checked for shape and dtype); ValueError
    names the first offending row by its index in the whole batch."""
    selected = np.flatnonzero(rows)
    if not len(selected):
        return
    for leaf, array in zip(leaves(space), arrays):
        try:
            _check_values(leaf, array[selected])
        except ValueError:
            for row in selected.tolist():  # a failure only: find the row to name
                try:
                    _check_values(leaf, array[row : row + 1])
                except ValueError:
                    raise ValueError(
                        f"action for env {row} is outside the action space {leaf}: {array[row]!r}"
                    ) from None
            raise


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
    elif isinstance(leaf, spaces.Text):
        bad = ((array < 0) | (array > len(leaf.character_set))).any(axis=1)
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
