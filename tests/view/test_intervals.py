"""The viewer's intervals stay inside the quantity's range (issue 43: 0.67 [-0.64, 1.97])."""

from __future__ import annotations

from ap_gym.view.index import _mean_ci


def test_a_score_interval_stays_inside_the_scores_range():
    scores = [0.0, 0.0, 2.0]
    mean, (lo, hi) = _mean_ci(sum(scores), sum(x * x for x in scores), 3, 0.0, 2.0)
    assert abs(mean - 2 / 3) < 1e-9 and lo == 0.0 and 0.0 < hi <= 2.0
    unclipped = _mean_ci(sum(scores), sum(x * x for x in scores), 3)[1]
    assert unclipped[0] < 0  # what the page showed before
    assert _mean_ci(5.0, 25.0, 1) == (5.0, None)  # one episode: no interval
    assert _mean_ci(0.0, 0.0, 0) == (None, None)
