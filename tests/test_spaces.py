"""Batched spaces: the planned action check must accept and refuse exactly what the general
check does; the hand-framed messages must be byte-compatible with multiprocessing's."""

import multiprocessing
import os

import numpy as np
import pytest
from gymnasium import spaces

from batchenv import spaces as batch_spaces
from batchenv.workers.protocol import read_message, write_message

BATCH = 4

SPACES = {
    "discrete": spaces.Discrete(3, start=-1),
    "box": spaces.Box(-1.0, 1.0, (2, 3), np.float32),
    "unbounded-box": spaces.Box(-np.inf, np.inf, (2,), np.float64),
    "int-box": spaces.Box(0, 5, (2,), np.int64),
    "multi-discrete": spaces.MultiDiscrete([2, 3]),
    "multi-binary": spaces.MultiBinary(3),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, (2,), np.float32))),
}


def _candidates(space: spaces.Space, rng: np.random.Generator) -> list:
    """Good batches first (so the planned check has cached their dtype), then bad ones."""
    space.seed(0)
    good = [space.sample() for _ in range(BATCH)]
    if isinstance(space, spaces.Tuple):
        parts = [np.stack([g[i] for g in good]) for i in range(2)]
        return [
            tuple(parts),
            (parts[0] + 5, parts[1]),
            (parts[0], np.full_like(parts[1], np.nan)),
            (parts[0],),
            parts,
        ]
    batch = np.stack([np.asarray(g) for g in good])
    result = [batch, batch.tolist(), batch.astype(np.int32) if batch.dtype.kind == "i" else batch]
    for row in range(BATCH):  # one bad row at a time: the error must name it
        for value in _just_outside(space):
            bad = batch.astype(np.float64).copy()
            bad.reshape(BATCH, -1)[row, -1] = value
            result.append(bad.astype(batch.dtype))
        if batch.dtype.kind == "f":
            for value in (np.nan, np.inf, -np.inf):
                bad = batch.copy()
                bad.reshape(BATCH, -1)[row, 0] = value
                result.append(bad)
    result += [
        batch[:-1],  # wrong batch size
        batch.astype(np.float64),  # the right values in a float dtype
        batch.astype(np.float32) if batch.dtype.kind != "f" else batch.astype(np.complex64),
        np.zeros((BATCH, 9)),
        rng.integers(-3, 9, size=batch.shape).astype(batch.dtype),
        np.ones(batch.shape, bool),
    ]
    return result


def _just_outside(space: spaces.Space) -> list[float]:
    """The nearest values outside ``space`` on both sides, and one far outside."""
    if isinstance(space, spaces.Discrete):
        return [space.start - 1, space.start + space.n, 7]
    if isinstance(space, spaces.MultiDiscrete):
        return [space.start[-1] - 1, space.start[-1] + space.nvec[-1], 7]
    if isinstance(space, spaces.MultiBinary):
        return [-1, 2, 7]
    low, high = float(space.low.reshape(-1)[-1]), float(space.high.reshape(-1)[-1])
    if not np.isfinite(high):
        return []
    if space.dtype.kind == "f":
        below = np.nextafter(space.dtype.type(low), space.dtype.type(-np.inf))
        above = np.nextafter(space.dtype.type(high), space.dtype.type(np.inf))
        return [float(below), float(above), 7.0]
    return [low - 1, high + 1, 7]


def _outcome(check, actions):
    try:
        return [np.array(leaf, copy=True) for leaf in check(actions)]
    except (TypeError, ValueError) as error:
        return type(error), str(error)


@pytest.mark.parametrize("name", list(SPACES))
@pytest.mark.parametrize("check_values", [True, False])
def test_planned_action_check_agrees_with_the_general_one(name, check_values):
    space = SPACES[name]
    planned = batch_spaces.action_checker(space, BATCH)
    rng = np.random.default_rng(1)
    outcomes = set()
    for _ in range(2):  # the second pass runs with every dtype already seen
        for actions in _candidates(space, rng):
            expected = _outcome(
                lambda a: batch_spaces.check_actions(space, a, BATCH, check_values), actions
            )
            got = _outcome(lambda a: planned(a, check_values), actions)
            if isinstance(expected, tuple):
                assert got == expected
                outcomes.add(expected[0].__name__)
            else:
                assert isinstance(got, list) and len(got) == len(expected)
                for a, b in zip(got, expected):
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)
                outcomes.add("ok")
    assert "ok" in outcomes and "ValueError" in outcomes  # both kinds were exercised


def test_unflattener_matches_unflatten():
    leaf = spaces.Box(-1.0, 1.0, (2,))
    nest = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Tuple((leaf, leaf))})
    values = [np.zeros(3), np.ones(3), np.full(3, 2.0)]
    assert batch_spaces.unflattener(leaf)(values[:1]) is values[0]
    assert batch_spaces.unflattener(nest)(values) == batch_spaces.unflatten(nest, values)


def test_hand_framed_messages_are_connection_messages():
    """read_message reads what Connection.send_bytes wrote, exactly one message (a passed
    file handle may follow on the socket), and Connection reads what write_message wrote."""
    ours, theirs = multiprocessing.Pipe()
    try:
        big = os.urandom(300_000)  # larger than a socket buffer: read in several parts
        for payload in (b"", b"S", b"x" * 70_000):
            theirs.send_bytes(payload)
            assert read_message(ours.fileno()) == payload
        theirs.send_bytes(b"request")
        os.write(theirs.fileno(), b"A")  # not framed, like send_handle's byte
        assert read_message(ours.fileno()) == b"request"
        assert os.read(ours.fileno(), 16) == b"A"

        reader = multiprocessing.Process(target=_echo_big, args=(theirs,))
        reader.start()
        write_message(ours.fileno(), big)
        assert read_message(ours.fileno()) == big[::-1]
        reader.join(10)
        assert reader.exitcode == 0

        write_message(ours.fileno(), b"S")
        assert theirs.recv_bytes() == b"S"
        os.write(theirs.fileno(), (9).to_bytes(4, "big") + b"cu")  # a frame cut short
        theirs.close()
        with pytest.raises(EOFError):
            read_message(ours.fileno())
    finally:
        ours.close()
        theirs.close()


def test_read_message_raises_eof_when_the_peer_is_gone():
    ours, theirs = multiprocessing.Pipe()
    theirs.close()
    with pytest.raises(EOFError):
        read_message(ours.fileno())
    ours.close()


def _echo_big(conn):
    conn.send_bytes(conn.recv_bytes()[::-1])
