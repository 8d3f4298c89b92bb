"""The progress bar of ``batchenv run``: env steps summed over every session of the run.

A trial ends only when all its sessions have, so a bar of trials sits at 0/1 for the
whole of ``--mode train``. :class:`StepProgress` instead counts the env steps the sessions
have reached, read every second from the ``frame`` column of their ``checkpoints.csv``
(one row per evaluation checkpoint, written by the session processes), and counts a
finished trial (done, pruned or failed) as its whole budget, so the bar ends at 100%:

    0/1 trials:  35%|███▌      | 84.0k/240k [01:05<02:01, 1.29kstep/s]

    >>> progress = StepProgress(run_path, trials=1, sessions=4, steps=60_000)
    >>> progress.trial_done(0)       # what the executor's on_trial callback says
    >>> progress.close()
"""

from __future__ import annotations

import threading
from pathlib import Path

from .session import CHECKPOINTS_NAME

__all__ = ["StepProgress", "last_frame"]

_POLL_SECONDS = 1.0


def last_frame(checkpoints: Path) -> int:
    """The ``frame`` of the last complete row of a session's checkpoints.csv (0: none yet)."""
    try:
        text = checkpoints.read_text()
    except OSError:
        return 0
    lines = text.split("\n")[1:-1]  # no header, no row still being written
    for line in reversed(lines):
        try:
            return int(float(line.split(",", 1)[0]))
        except ValueError:
            continue
    return 0


class StepProgress:
    """A tqdm bar of env steps over the sessions of ``trials`` trials of ``sessions``
    sessions, ``steps`` each (None: unknown, the bar shows a count).

    A daemon thread reads the sessions' checkpoints every second until :meth:`close`.
    ``finished`` trial numbers (of an earlier, interrupted run) count as done.
    """

    def __init__(
        self,
        path: Path,
        *,
        trials: int,
        sessions: int,
        steps: int | None,
        finished: set[int] | None = None,
    ):
        from tqdm import tqdm

        self.path = Path(path)
        self.trials = trials
        self.sessions = sessions
        self.steps = steps
        self._finished = set(finished or ())
        self._lock = threading.Lock()  # guards _finished
        total = trials * sessions * steps if steps else None
        self.bar = tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True)
        self._stop = threading.Event()
        self._update()
        self._thread = threading.Thread(target=self._poll, name="step-progress", daemon=True)
        self._thread.start()

    def trial_done(self, number: int) -> None:
        """Count trial ``number`` as finished: its whole budget, even when pruned early."""
        with self._lock:
            self._finished.add(number)
        self._update()

    def write(self, line: str) -> None:
        """Print ``line`` above the bar."""
        self.bar.write(line)

    def close(self) -> None:
        """Stop reading the checkpoints and close the bar (idempotent)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_POLL_SECONDS * 5)
        self.bar.close()

    def _poll(self) -> None:
        while not self._stop.wait(_POLL_SECONDS):
            self._update()

    def _update(self) -> None:
        with self._lock:
            finished = set(self._finished)
        reached = 0
        for trial in self.path.glob("t*"):
            number = _trial_number(trial.name)
            if number is None or number in finished:
                continue
            for session in trial.glob(f"s*/{CHECKPOINTS_NAME}"):
                frame = last_frame(session)
                reached += min(frame, self.steps) if self.steps else frame
        budget = self.sessions * self.steps if self.steps else 0
        bar = self.bar
        bar.n = reached + budget * len(finished)
        bar.set_description_str(f"{len(finished)}/{self.trials} trials", refresh=False)
        bar.refresh()


def _trial_number(name: str) -> int | None:
    digits = name[1:]
    return int(digits) if name.startswith("t") and digits.isdigit() else None
