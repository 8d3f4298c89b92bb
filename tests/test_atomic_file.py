"""Files replaced atomically (batchenv.atomic_file): the old file or the new one, never half."""

from __future__ import annotations

import threading

import pytest

from batchenv.atomic_file import replacing, write_atomic


def test_replacing_moves_the_new_file_into_place(tmp_path):
    target = tmp_path / "record.json"
    target.write_text("old")
    with replacing(target) as partial:
        assert partial.parent == tmp_path and partial != target
        partial.write_text("new")
        assert target.read_text() == "old"  # untouched until the block ends
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"old checkpoint")
    with pytest.raises(RuntimeError, match="disk full"):
        with replacing(target) as partial:
            partial.write_bytes(b"half a chec")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"old checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_concurrent_writers_each_leave_a_whole_file(tmp_path):
    # Threads of one process writing the same target (a shared cache): each call has a
    # temporary file of its own, so the target is always one writer's whole text.
    target = tmp_path / "random_returns.json"
    texts = [str(k) * 200_000 for k in range(4)]
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        try:
            for _ in range(20):
                write_atomic(target, text)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert target.read_text() in texts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random_returns.json"]
