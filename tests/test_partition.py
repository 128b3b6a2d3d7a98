import numpy as np
import pytest

from fedlib.data.partition import (
    class_counts,
    dirichlet,
    dirichlet_blocks,
    dirichlet_sized,
    fedgpa_setting,
    iid,
    local_test_indices,
    long_tail,
    partition,
    shards,
    skew,
)
from fedlib.errors import ConfigError

LABELS = np.repeat(np.arange(10), 600)  # 6000 samples, balanced


def assert_disjoint(parts, total=None):
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat)), "a sample went to two clients"
    if total is not None:
        assert len(flat) == total


def entropy(counts):
    p = counts / counts.sum(1, keepdims=True)
    return -(p * np.log(np.where(p > 0, p, 1))).sum(1).mean()


def test_iid_sizes_and_coverage():
    parts = iid(LABELS, 7, np.random.default_rng(0))
    assert_disjoint(parts, len(LABELS))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_min_size_disjoint_and_skew_grows_as_alpha_falls():
    low = dirichlet(LABELS, 20, np.random.default_rng(0), alpha=0.1, min_size=20)
    high = dirichlet(LABELS, 20, np.random.default_rng(0), alpha=100.0, min_size=20)
    for parts in (low, high):
        assert_disjoint(parts, len(LABELS))
        assert min(len(p) for p in parts) >= 20
    assert entropy(class_counts(LABELS, low, 10)) < 1.2 < entropy(class_counts(LABELS, high, 10))


def test_dirichlet_blocks_draws_alpha_005_over_100_long_tailed_clients_in_equal_parts():
    """FedPRP's official split: equal contiguous parts (sizes differ by at most one), every sample once, the skew
    growing as alpha falls; at alpha = 0.05 it draws over 100 clients of a long-tailed FMNIST-sized set, where the
    class-wise split cannot give every client two samples."""
    counts = [int(6000 * 0.1 ** (c / 9)) for c in range(10)]   # gamma = 0.1, exponential: 24,516 samples
    labels = np.repeat(np.arange(10), counts)
    low = dirichlet_blocks(labels, 100, np.random.default_rng(0), alpha=0.05)
    high = dirichlet_blocks(labels, 100, np.random.default_rng(0), alpha=100.0)
    for parts in (low, high):
        assert_disjoint(parts, len(labels))
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 24_516
    assert entropy(class_counts(labels, low, 10)) < entropy(class_counts(labels, high, 10))
    with pytest.raises(ConfigError, match="min_size"):
        dirichlet(labels, 100, np.random.default_rng(0), alpha=0.05, min_size=2)
    # one block of two clients, two classes, alpha tiny: each class goes whole to one client, then the equal re-cut
    two = dirichlet_blocks(np.array([0] * 6 + [1] * 2), 2, np.random.default_rng(3), alpha=1e-6, min_share=0.0)
    assert [len(p) for p in two] == [4, 4]


def test_partition_is_deterministic_per_seed():
    spec = {"name": "dirichlet", "alpha": 0.3}
    a, b = partition(LABELS, 10, 10, spec, 3), partition(LABELS, 10, 10, spec, 3)
    c = partition(LABELS, 10, 10, spec, 4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_shards_give_exactly_s_classes_balanced_holders():
    parts = shards(LABELS, 20, np.random.default_rng(1), classes_per_client=3)
    assert_disjoint(parts, len(LABELS))
    counts = class_counts(LABELS, parts, 10)
    assert ((counts > 0).sum(1) == 3).all()
    holders = (counts > 0).sum(0)
    assert holders.max() - holders.min() <= 1  # 60 slots over 10 classes: 6 each


def test_skew_setting1_shares():
    spec = fedgpa_setting(1, 10)
    assert spec == {"n": 600, "k": 5}
    labels = np.repeat(np.arange(10), 6000)
    parts = skew(labels, 20, np.random.default_rng(0), s=20, **spec)
    assert_disjoint(parts)
    counts = class_counts(labels, parts, 10)
    assert (counts.sum(1) == 600).all()
    # 20% uniform: 12 of every class; 80% over 5 dominant classes: +96 each
    assert set(np.unique(counts)) == {12, 108}
    assert ((counts == 108).sum(1) == 5).all()


@pytest.mark.parametrize("setting", [2, 3])
def test_skew_settings_2_3_draw_n_and_k_from_their_sets(setting):
    labels = np.repeat(np.arange(10), 6000)
    parts = partition(labels, 10, 30, {"name": "skew", "s": 0, "setting": setting}, 0)
    counts = class_counts(labels, parts, 10)
    ks = (counts > 0).sum(1)
    assert set(ks) <= {3, 4, 5, 6, 7} and len(set(ks)) > 1
    sizes = set(counts.sum(1))
    assert sizes == {600} if setting == 2 else sizes <= {300, 900, 1500} and len(sizes) > 1


@pytest.mark.parametrize("alpha", [0.3, 1.0])
def test_dirichlet_sized_fixes_the_client_size_and_its_concentration_matches_the_dirichlet_moment(alpha):
    # for shares p ~ Dir(alpha, ..., alpha) over K classes, E[sum_c p_c^2] = (alpha + 1) / (K alpha + 1)
    labels = np.repeat(np.arange(10), 100_000)
    parts = dirichlet_sized(labels, 1000, np.random.default_rng(0), alpha=alpha, n=600)
    assert_disjoint(parts, 600_000)
    counts = class_counts(labels, parts, 10)
    assert (counts.sum(1) == 600).all()
    assert ((counts / 600) ** 2).sum(1).mean() == pytest.approx((alpha + 1) / (10 * alpha + 1), abs=0.01)


def test_dirichlet_sized_through_the_dispatcher_is_seeded_and_runs_out_clearly():
    spec = {"name": "dirichlet_sized", "alpha": 0.3, "n": 600}
    one, two = (partition(np.repeat(np.arange(10), 6000), 10, 20, spec, seed=4) for _ in range(2))
    assert all(np.array_equal(a, b) for a, b in zip(one, two))
    with pytest.raises(ConfigError, match="ran out"):
        partition(LABELS, 10, 20, spec, 0)   # 12,000 samples asked of 6,000


def test_long_tail_ratio():
    kept = long_tail(LABELS, np.random.default_rng(0), imbalance=0.1)
    n = np.bincount(LABELS[kept], minlength=10)
    assert n[0] == 600 and n[-1] == 60
    assert (np.diff(n) <= 0).all()


def test_long_tail_with_shards_keeps_only_kept_samples():
    parts = partition(LABELS, 10, 10, {"name": "shards", "s": 2, "imbalance": 0.05}, 0)
    total = class_counts(LABELS, parts, 10).sum(0)
    assert total[0] == 600 and total[-1] == 30


def test_local_test_follows_train_distribution():
    labels_test = np.repeat(np.arange(10), 100)
    train_counts = np.array([[100, 0, 0, 300, 0, 0, 0, 0, 0, 0], [10] * 10])
    tests = local_test_indices(labels_test, train_counts, 0.25, 0)
    c = class_counts(labels_test, tests, 10)
    assert c[0].tolist() == [25, 0, 0, 75, 0, 0, 0, 0, 0, 0]
    assert c[1].sum() == 25 and (c[1] > 0).sum() >= 5


@pytest.mark.parametrize("spec, field", [
    ({"name": "dirichlet", "alpha": 0}, "alpha"),
    ({"name": "dirichlet", "alpha": -1}, "alpha"),
    ({"name": "skew", "s": 101, "setting": 1}, "s"),
    ({"name": "skew", "s": -5, "n": 10, "k": 2}, "s"),
    ({"name": "shards", "s": 11}, "s"),
    ({"name": "nope"}, "partition.name"),
    ({"name": "iid", "imbalance": 0}, "imbalance"),
    ({"name": "iid", "bogus": 1}, "partition.bogus"),
])
def test_bad_partition_arguments_name_the_field(spec, field):
    with pytest.raises(ConfigError) as err:
        partition(LABELS, 10, 10, spec, 0)
    assert err.value.field == field
    assert "not allowed" in str(err.value)


def test_more_clients_than_samples_is_refused():
    with pytest.raises(ConfigError, match="num_clients"):
        partition(LABELS[:5], 10, 6, {"name": "iid"}, 0)


def test_skew_pool_exhaustion_is_a_clear_error():
    with pytest.raises(ConfigError, match="ran out"):
        partition(LABELS, 10, 20, {"name": "skew", "s": 20, "n": 600, "k": 5}, 0)


@pytest.mark.parametrize("n", [["a"], "many", [3, None]])
def test_a_non_numeric_skew_size_is_a_config_error_not_a_stack_trace(n):
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ConfigError, match=r"n=.* is not allowed: (a positive integer|an integer)"):
        partition(labels, 10, 4, {"name": "skew", "s": 20, "n": n, "k": 2}, seed=0)
