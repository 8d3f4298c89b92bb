"""SLM Lab's session and trial metrics against values worked out by hand."""

import math
import warnings

import pytest

from batchenv.experiment.metrics import (
    METRIC_NAMES,
    SESSION_METRIC_NAMES,
    MetricWarning,
    consistency,
    session_metrics,
    trial_metrics,
)

TIGHT = 1e-12


def approx(value):
    return pytest.approx(value, rel=TIGHT, abs=TIGHT)


def test_session_golden_values():
    # returns R = [1, 3, 2, 5], frames t = [10, 20, 30, 40], R_rand = 1
    # local strengths str = R - 1 = [0, 2, 1, 4]
    # strength = (0 + 2 + 1 + 4) / 4 = 7/4; max = 4; final = 4
    # sample_efficiency = (0/10 + 2/20 + 1/30 + 4/40) / (0 + 2 + 1 + 4)
    #                   = (0 + 1/10 + 1/30 + 1/10) / 7 = (7/30) / 7 = 1/30
    # stability: steps str[i+1] - str[i] = [2, -1, 3]; drops min(., 0) = [0, -1, 0], sum -1
    #            sum of str before the last = 0 + 2 + 1 = 3; 1 - |-1/3| = 2/3
    # total_reward_ma = mean of all 4 returns (N < 100) = 11/4
    m = session_metrics([1, 3, 2, 5], [10, 20, 30, 40], random_return=1.0)
    assert m == {
        "frames": 40.0,
        "total_reward_ma": approx(11 / 4),
        "final_return": 5.0,
        "strength": approx(7 / 4),
        "max_strength": 4.0,
        "final_strength": 4.0,
        "sample_efficiency": approx(1 / 30),
        "training_efficiency": pytest.approx(math.nan, nan_ok=True),
        "stability": approx(2 / 3),
    }
    assert tuple(m) == SESSION_METRIC_NAMES


def test_stability_counts_only_drops():
    # R = [10, 6, 8, 4, 9], R_rand = 0: steps [-4, 2, -4, 5], drops [-4, 0, -4, 0] sum -8
    # sum of str before the last = 10 + 6 + 8 + 4 = 28; stability = 1 - 8/28 = 5/7
    m = session_metrics([10, 6, 8, 4, 9], [1, 2, 3, 4, 5])
    assert m["stability"] == approx(5 / 7)
    # never dropping: stability 1 however unevenly it rises
    assert session_metrics([1, 2, 10, 11], [1, 2, 3, 4])["stability"] == 1.0


def test_training_efficiency_skips_zero_opt_steps_in_the_numerator_only():
    # R = [2, 3, 2, 5], R_rand = 1: str = [1, 2, 1, 4], sum 8
    # opt steps [0, 5, 10, 20]: checkpoint 0 has t = 0 and is left out of the numerator:
    #   (2/5 + 1/10 + 4/20) = 0.4 + 0.1 + 0.2 = 0.7
    # the denominator is the sum of *all* strengths (SLM Lab's code): 0.7 / 8 = 0.0875
    # frames [0, 100, 200, 400]: (2/100 + 1/200 + 4/400) / 8 = 0.035 / 8 = 0.004375
    m = session_metrics([2, 3, 2, 5], [0, 100, 200, 400], [0, 5, 10, 20], random_return=1.0)
    assert m["training_efficiency"] == approx(0.0875)
    assert m["sample_efficiency"] == approx(0.004375)


def test_total_reward_ma_averages_the_last_100_checkpoints():
    # N = 150, R = 0..149: the last 100 are 50..149, mean (50 + 149) / 2 = 99.5
    returns = list(range(150))
    assert session_metrics(returns, returns)["total_reward_ma"] == approx(99.5)
    # N = 4 < 100: all of them, (1 + 2 + 3 + 4) / 4 = 2.5 (strength with R_rand = 1 is 1.5)
    m = session_metrics([1, 2, 3, 4], [1, 2, 3, 4], random_return=1.0)
    assert m["total_reward_ma"] == approx(2.5)
    assert m["strength"] == approx(1.5)


def test_non_positive_divisors_give_nan_with_a_warning():
    # R = [0, 1, 0], R_rand = 5: str = [-5, -4, -5]; sum -14 and sum before the last -9
    with pytest.warns(MetricWarning) as record:
        m = session_metrics([0, 1, 0], [10, 20, 30], [1, 2, 3], random_return=5.0)
    messages = [str(w.message) for w in record]
    assert any(
        msg.startswith("sample_efficiency is NaN: the sum of local strengths (-14)")
        for msg in messages
    )
    assert any(msg.startswith("training_efficiency is NaN") for msg in messages)
    assert any(
        msg.startswith("stability is NaN: the sum of local strengths before the last")
        for msg in messages
    )
    assert math.isnan(m["sample_efficiency"]) and math.isnan(m["training_efficiency"])
    assert math.isnan(m["stability"])
    assert m["strength"] == approx(-14 / 3)  # no divisor: still defined
    with pytest.warns(MetricWarning, match=r"^consistency is NaN: the sum over checkpoints"):
        assert math.isnan(consistency([[-1, -2], [-3, -1]]))


def test_nan_checkpoints_are_dropped():
    # R = [1, NaN, 3], t = [10, 20, 30] -> kept R = [1, 3], t = [10, 30], R_rand = 0
    # strength 2; sample_efficiency (1/10 + 3/30) / 4 = 0.05; no drop: stability 1
    m = session_metrics([1, math.nan, 3], [10, 20, 30])
    assert m["strength"] == approx(2.0)
    assert m["sample_efficiency"] == approx(0.05)
    assert m["stability"] == 1.0
    # a trailing NaN: final_return is the last finite one, frames the last given
    m = session_metrics([1, 3, math.nan], [10, 20, 30])
    assert m["final_return"] == 3.0 and m["frames"] == 30.0


def test_empty_and_single_checkpoint():
    with pytest.warns(MetricWarning, match="no checkpoint with a finite return"):
        m = session_metrics([], [])
    assert all(math.isnan(v) for v in m.values())
    with pytest.warns(MetricWarning, match="no checkpoint with a finite return"):
        m = session_metrics([math.nan], [10])
    assert m["frames"] == 10.0 and math.isnan(m["strength"])
    # one checkpoint: stability is undefined, silently; the rest is defined
    # str = [4]; sample_efficiency = (4/10) / 4 = 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = session_metrics([5], [10], random_return=1.0)
    assert math.isnan(m["stability"])
    assert m["strength"] == 4.0 and m["sample_efficiency"] == approx(0.1)


def test_consistency_of_three_sessions_of_unequal_length():
    # strengths cut to the shortest (3 checkpoints):
    #   checkpoint 0: [1, 3, 5]   mu 3, sample var (4 + 0 + 4) / 2 = 4, sigma 2
    #   checkpoint 1: [3, 3, 6]   mu 4, sample var (1 + 1 + 4) / 2 = 3, sigma sqrt(3)
    #   checkpoint 2: [5, 8, 11]  mu 8, sample var (9 + 0 + 9) / 2 = 9, sigma 3
    # consistency = 1 - 2 * (5 + sqrt(3)) / 15 = (5 - 2 sqrt(3)) / 15
    expected = (5 - 2 * math.sqrt(3)) / 15
    assert consistency([[1, 3, 5, 99], [3, 3, 8], [5, 6, 11, 49, 59]]) == approx(expected)
    # in a trial it is computed on strengths (returns - R_rand), not raw returns: R_rand = 1
    sessions = [
        {"returns": r, "frames": list(range(1, len(r) + 1)), "random_return": 1.0}
        for r in ([2, 4, 6, 100], [4, 4, 9], [6, 7, 12, 50, 60])
    ]
    assert trial_metrics(sessions)["consistency"] == approx(expected)


def test_consistency_edge_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(consistency([[1, 2, 3]]))  # one session: no sample std
        assert math.isnan(consistency([]))
        assert math.isnan(consistency([[], [1, 2]]))  # no common checkpoint
    # a checkpoint where any session is NaN is left out: only checkpoint 1 remains,
    # [2, 4]: mu 3, sigma sqrt(2); 1 - 2 sqrt(2) / 3
    assert consistency([[math.nan, 2], [1, 4]]) == approx(1 - 2 * math.sqrt(2) / 3)


def test_trial_golden_values():
    # A: R = [1, 3, 2, 5], R_rand 1, str [0, 2, 1, 4]  (see test_session_golden_values)
    #    strength 7/4, max 4, final 4, sample_eff 1/30, stability 2/3, ma 11/4, final R 5
    # B: R = [3, 3, 4, 7], R_rand 1, str [2, 2, 3, 6]
    #    strength 13/4, max 6, final 6, stability 1 (no drop), ma 17/4, final R 7
    #    sample_eff (2/10 + 2/20 + 3/30 + 6/40) / 13 = 0.55 / 13 = 11/260
    # consistency: per checkpoint sigma of two values = |a - b| / sqrt(2):
    #    [2, 0, 2, 2] / sqrt(2), sum 3 sqrt(2); mu = [1, 2, 2, 5], sum 10
    #    1 - 2 * 3 sqrt(2) / 10 = 1 - 0.6 sqrt(2)
    # final_return_std: sample std (ddof=1) of [5, 7] = sqrt(2)
    frames = [10, 20, 30, 40]
    t = trial_metrics(
        [
            {"returns": [1, 3, 2, 5], "frames": frames, "random_return": 1.0},
            {"returns": [3, 3, 4, 7], "frames": frames, "random_return": 1.0},
        ]
    )
    assert tuple(t) == METRIC_NAMES
    assert t["strength"] == approx((7 / 4 + 13 / 4) / 2)
    assert t["max_strength"] == approx(5.0)
    assert t["final_strength"] == approx(5.0)
    assert t["sample_efficiency"] == approx((1 / 30 + 11 / 260) / 2)
    assert t["stability"] == approx((2 / 3 + 1) / 2)
    assert t["total_reward_ma"] == approx((11 / 4 + 17 / 4) / 2)
    assert t["final_return"] == approx(6.0)
    assert t["final_return_std"] == approx(math.sqrt(2))
    assert t["consistency"] == approx(1 - 0.6 * math.sqrt(2))
    assert t["frames"] == 40.0 and t["sessions"] == 2
    assert math.isnan(t["training_efficiency"])


def test_trial_of_one_session_and_of_an_empty_session():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = trial_metrics([{"returns": [1, 3, 2, 5], "frames": [10, 20, 30, 40]}])
    assert math.isnan(t["consistency"]) and math.isnan(t["final_return_std"])
    assert t["strength"] == approx(11 / 4) and t["sessions"] == 1
    # a session without a finite return is left out of the means (pandas' mean in SLM Lab)
    with pytest.warns(MetricWarning, match="no checkpoint with a finite return"):
        t = trial_metrics(
            [{"returns": [1, 3], "frames": [1, 2]}, {"returns": [math.nan], "frames": [1]}]
        )
    assert t["strength"] == approx(2.0) and t["sessions"] == 2


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least one session"):
        trial_metrics([])
    with pytest.raises(ValueError, match="frames has 2 entries, returns 3"):
        session_metrics([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="opt_steps has 1 entries"):
        session_metrics([1, 2], [1, 2], [1])
