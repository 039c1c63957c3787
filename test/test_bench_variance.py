"""The variance benchmark's statistics: summed variance by the Gram trick, bootstrap bands."""

import numpy as np
import pytest

from bcg_ros.bench import variance


def test_summed_variance_equals_numpy_on_the_resampled_rows():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(12, 50)) * rng.uniform(0.1, 3.0, 50)
    gram, sq = g @ g.T, np.sum(g * g, 1)
    idx = rng.integers(0, 12, (5, 12))
    counts = np.stack([np.bincount(i, minlength=12) for i in idx]).astype(float)
    got = variance.summed_variance(gram, sq, np.vstack([np.ones(12), counts]))
    assert got[0] == pytest.approx(np.sum(np.var(g, 0, ddof=1)), rel=1e-10)
    for r, i in enumerate(idx):
        assert got[r + 1] == pytest.approx(np.sum(np.var(g[i], 0, ddof=1)), rel=1e-10)


def test_bootstrap_ratio_and_bands():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(40, 30))
    b = variance.bootstrap(3.0 * base, base, resamples=300, seed=0)
    assert b['ratio'][0] == pytest.approx(9.0)
    # Plain and BCG are resampled together: a constant ratio has a zero-width band.
    assert b['ratio'][1][0] == pytest.approx(9.0) and b['ratio'][1][1] == pytest.approx(9.0)
    lo, hi = b['bcg'][1]
    assert lo < b['bcg'][0] < hi
    assert b['std']['ratio'] == pytest.approx(0.0, abs=1e-9) and b['std']['bcg'] > 0


def test_robust_ratios_see_through_one_heavy_env():
    rng = np.random.default_rng(2)
    plain = rng.normal(size=(40, 30)) + 1.0
    bcg = 0.5 * (plain - plain.mean(0)) + plain.mean(0)     # half the spread, same mean
    r = variance.robust_ratios(plain, bcg)
    assert r['median'] == pytest.approx(4.0) and r['trimmed'] == pytest.approx(4.0)
    assert r['norm_ratio'] == pytest.approx(1.0) and r['cosine'] == pytest.approx(1.0)
    heavy = plain.copy()
    heavy[0] *= 1e4                                          # one env dominates the sum
    b = variance.bootstrap(heavy, bcg, resamples=50, seed=0)
    r = variance.robust_ratios(heavy, bcg)
    assert b['ratio'][0] > 1e5
    assert 2.0 < r['median'] < 8.0 and 2.0 < r['trimmed'] < 8.0
