"""Files replaced atomically: a process killed mid-write leaves the old file or the new one,
never half of one::

    with replacing(run_dir / "checkpoint.pt") as partial:
        torch.save(state, partial)
    write_atomic(run_dir / "run.json", json.dumps(record))

The new content goes to a temporary file next to the target (``.NAME.<random>.tmp``, unique
to the call, so concurrent writers never share one), which ``os.replace`` moves into place
once it is complete. If writing fails, the temporary file is removed and the target is
untouched.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["replacing", "write_atomic"]


@contextmanager
def replacing(target: Path | str) -> Iterator[Path]:
    """A temporary path to write the new ``target`` to; moved over ``target`` on exit, removed
    if the block raises. The target's folder must exist."""
    target = Path(target)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(target: Path | str, text: str) -> None:
    """Write ``text`` to ``target`` atomically (see the module docstring)."""
    with replacing(target) as partial:
        partial.write_text(text)
