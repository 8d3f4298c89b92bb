"""Logger: TensorBoard event files plus a CSV whose header grows with new names."""

from __future__ import annotations

import csv
import os

import pytest
import torch

from batchenv.logger import Logger


def read_csv(path):
    with open(path, newline="") as file:
        return list(csv.reader(file))


def test_writes_csv_and_tensorboard_files(tmp_path):
    with Logger(tmp_path) as logger:
        logger.log(10, {"mean_score": torch.tensor(21.5), "loss": 0.25})
        logger.log(20, {"mean_score": 40.0, "loss": torch.tensor([0.5])})
    assert read_csv(tmp_path / "metrics.csv") == [
        ["step", "mean_score", "loss"],
        ["10", "21.5", "0.25"],
        ["20", "40.0", "0.5"],
    ]
    events = [name for name in os.listdir(tmp_path) if name.startswith("events.out.tfevents")]
    assert events and os.path.getsize(tmp_path / events[0]) > 0


def test_header_grows_when_new_names_appear(tmp_path):
    with Logger(tmp_path, tensorboard=False) as logger:
        logger.log(1, {"a": 1.0})
        logger.log(2, {"b": 2.0})
        logger.log(3, {"a": 3.0, "c": 4.0})
    assert read_csv(tmp_path / "metrics.csv") == [
        ["step", "a", "b", "c"],
        ["1", "1.0", "", ""],
        ["2", "", "2.0", ""],
        ["3", "3.0", "", "4.0"],
    ]
    assert not any(name.startswith("events") for name in os.listdir(tmp_path))


def test_reopening_a_logdir_continues_its_csv(tmp_path):
    with Logger(tmp_path, tensorboard=False) as logger:
        logger.log(1, {"a": 1.0})
    with Logger(tmp_path, tensorboard=False) as logger:
        logger.log(2, {"a": 2.0, "b": 5.0})
    assert read_csv(tmp_path / "metrics.csv") == [
        ["step", "a", "b"],
        ["1", "1.0", ""],
        ["2", "2.0", "5.0"],
    ]


def test_misuse_is_reported(tmp_path):
    logger = Logger(tmp_path, tensorboard=False)
    with pytest.raises(ValueError, match="summaries must be scalars"):
        logger.log(1, {"v": torch.zeros(2)})
    logger.close()
    logger.close()
    with pytest.raises(ValueError, match="closed Logger"):
        logger.log(2, {"a": 1.0})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metrics.csv").write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="not a batchenv metrics file"):
        Logger(tmp_path / "other")
