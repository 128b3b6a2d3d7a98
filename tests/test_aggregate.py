import numpy as np
import torch
from scipy.optimize import minimize

from fedlib.aggregate import mix, simplex_qp, weighted_average
from fedlib.engine.core import Batch
from fedlib.methods.fedgpa import classifier_weights, extractor_weights, prototype_distances
from fedlib.methods.fedpac import collaboration_weights
from fedlib.prototypes import aggregate_prototypes, class_means, feature_variance, pad_prototypes


def test_weighted_average_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(0.0)}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor(4.0)}
    out = weighted_average([a, b], [100, 300])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert torch.allclose(out["b"], torch.tensor(3.0))
    rows = mix([a, b], [[1.0, 0.0], [0.5, 0.5]])
    assert torch.allclose(rows[0]["w"], a["w"]) and torch.allclose(rows[1]["w"], torch.tensor([2.0, 4.0]))


def test_mix_matches_a_loop_over_sources_and_each_copy_owns_its_tensors():
    gen = torch.Generator().manual_seed(0)
    dicts = [{"conv": torch.randn(4, 3, 2, 2, generator=gen), "count": torch.tensor(2 * j + 1)} for j in range(5)]
    W = torch.rand(3, 5, generator=gen, dtype=torch.float64).numpy()
    rows = mix(dicts, W)
    for i, row in enumerate(rows):
        w = W[i] / W[i].sum()
        loop = sum(float(w[j]) * dicts[j]["conv"].double() for j in range(5)).float()
        assert torch.allclose(row["conv"], loop, atol=1e-7) and row["conv"].dtype == torch.float32
        assert row["count"].dtype == torch.int64   # an integer buffer: averaged, then rounded
        assert row["count"].item() == round(float(sum(w[j] * (2 * j + 1) for j in range(5))))
    assert rows[0]["conv"].untyped_storage().nbytes() == 4 * 3 * 2 * 2 * 4   # no view into the other copies


def slsqp_simplex(objective, m):
    res = minimize(objective, np.full(m, 1 / m), method="SLSQP", bounds=[(0, 1)] * m,
                   constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}], options={"ftol": 1e-12, "maxiter": 500})
    return res.x


def test_simplex_qp_diagonal_closed_form():
    q = np.array([1.0, 2.0, 4.0])
    expected = (1 / q) / (1 / q).sum()
    assert np.allclose(simplex_qp(np.diag(q), zero_below=0), expected, atol=1e-5)


def test_fedpac_weights_match_an_independent_qp():
    g = torch.Generator().manual_seed(0)
    m, K, d = 5, 4, 3
    protos = torch.randn(m, K, d, generator=g)
    counts = torch.randint(1, 30, (m, K), generator=g).float()
    var = torch.rand(m, generator=g) * 0.5 + 0.1
    A = collaboration_weights(protos, counts, var)
    p = (counts / counts.sum(1, keepdim=True)).numpy()
    h = p[:, :, None] * protos.numpy()
    for i in range(m):
        # bias ||h_i - sum_j a_j h_j||^2 + variance sum_j a_j^2 v_j, written independently of FedPAC's D_i
        def obj(a, i=i):
            return ((h[i] - np.tensordot(a, h, 1)) ** 2).sum() + (a ** 2 * var.numpy()).sum()

        ref = slsqp_simplex(obj, m)
        assert np.isclose(obj(A[i]), obj(ref), rtol=1e-3, atol=1e-5), (i, A[i], ref)
        assert np.isclose(A[i].sum(), 1) and (A[i] >= 0).all()


def test_fedgpa_distances_by_hand():
    protos = torch.tensor([[[0.0, 0.0], [1.0, 0.0]], [[3.0, 4.0], [1.0, 0.0]]])  # 2 clients, 2 classes
    counts = torch.tensor([[1.0, 3.0], [2.0, 2.0]])
    P = prototype_distances(protos, counts)
    # P_01 = p_00 * 5 + p_01 * 0 = 0.25 * 5; P_10 = 0.5 * 5
    assert torch.allclose(P, torch.tensor([[0.0, 1.25], [2.5, 0.0]]))


def test_fedgpa_extractor_weights_eq_9_11():
    P = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 4.0], [2.0, 4.0, 0.0]])
    sizes = torch.tensor([100.0, 100.0, 200.0])
    A = extractor_weights(P, sizes, mu=0.5)
    # client 0: P_00 := 1 (nearest peer) -> inverse [1, 1, 0.5] / 2.5; sizes [.25, .25, .5]
    expected0 = 0.5 * np.array([0.4, 0.4, 0.2]) + 0.5 * np.array([0.25, 0.25, 0.5])
    assert np.allclose(A[0], expected0)
    assert np.allclose(A.sum(1), 1)
    assert np.allclose(extractor_weights(P, sizes, mu=0.0), [[0.25, 0.25, 0.5]] * 3)


def test_fedgpa_classifier_weights_match_independent_qp():
    g = torch.Generator().manual_seed(1)
    m, K, d = 4, 3, 2
    protos = torch.randn(m, K, d, generator=g)
    counts = torch.randint(1, 20, (m, K), generator=g).float()
    var = torch.rand(m, generator=g) + 0.2
    B = classifier_weights(protos, counts, var)
    p = (counts / counts.sum(1, keepdim=True)).numpy()
    C = protos.numpy()
    for i in range(m):
        obj = lambda b: (p[i][:, None] * (C[i] - np.tensordot(b, C, 1)) ** 2).sum() + (b ** 2 * var.numpy()).sum()  # noqa
        ref = slsqp_simplex(obj, m)
        assert np.isclose(obj(B[i]), obj(ref), rtol=1e-3, atol=1e-5)


def test_prototypes_and_variance_against_loops():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(50, 4, generator=g)
    y = torch.randint(0, 3, (50,), generator=g)
    means, counts = class_means(z, y, 5)
    for k in range(3):
        assert torch.allclose(means[k], z[y == k].mean(0), atol=1e-6)
    assert (counts[3:] == 0).all() and (means[3:] == 0).all()
    n, p = len(y), counts / len(y)
    expected = (sum(p[k] * (z[y == k] ** 2).sum() / counts[k] for k in range(3))
                - sum(p[k] ** 2 * (means[k] ** 2).sum() for k in range(3))) / n
    sq = torch.stack([(z[y == k] ** 2).sum() for k in range(3)] + [torch.tensor(0.0)] * 2)
    assert torch.isclose(feature_variance(counts, sq, means), expected, atol=1e-6)


def test_global_prototypes_are_count_weighted_and_padding():
    protos = torch.tensor([[[1.0], [0.0]], [[4.0], [2.0]]])
    counts = torch.tensor([[1.0, 0.0], [2.0, 5.0]])
    glob, present = aggregate_prototypes(protos, counts)
    assert torch.allclose(glob, torch.tensor([[3.0], [2.0]])) and present.all()
    padded = pad_prototypes(protos, counts, glob)
    assert padded[0, 1, 0] == 2.0 and padded[0, 0, 0] == 1.0


def test_prototype_contrastive_by_hand_and_over_sets():
    import math

    from fedlib.losses import prototype_contrastive

    z = torch.tensor([[1.0, 0.0]])
    C = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    y = torch.tensor([0])
    # -log e^{1/t} / (e^{0/t} + e^{-1/t}) with t = 0.5: negatives only in the denominator (FedPCL Eq. 8)
    expected = -(1 / 0.5) + math.log(math.exp(0.0) + math.exp(-2.0))
    batch = Batch(None, y)
    assert math.isclose(float(prototype_contrastive(z, batch, C, 0.5)), expected, rel_tol=1e-6)
    two = torch.stack([C, C.flip(0)])
    mean_of_sets = (prototype_contrastive(z, batch, C, 0.5) + prototype_contrastive(z, batch, C.flip(0), 0.5)) / 2
    assert torch.isclose(prototype_contrastive(z, batch, two, 0.5), mean_of_sets)


def test_fedpcl_official_loss_by_hand():
    """Two samples, one per class, on their own prototypes, two identical views, tau = 1: each row's positive is the
    other view of its sample (similarity 1) among three columns (similarities 0, 1, 0): log(2 + e) - 1 per row."""
    import math

    from fedlib.losses import prototype_anchored_contrastive

    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    C = torch.eye(2)
    batch = Batch(None, torch.tensor([0, 1]))
    assert math.isclose(float(prototype_anchored_contrastive(z, batch, C, 1.0)), math.log(2 + math.e) - 1,
                        rel_tol=1e-6)
    # summed (not averaged) over the m prototype sets, as the official code adds one loss per client
    assert math.isclose(float(prototype_anchored_contrastive(z, batch, torch.stack([C, C]), 1.0)),
                        2 * (math.log(2 + math.e) - 1), rel_tol=1e-6)


def _official_loop(z, y, sets, tau):
    """The official ConLoss written as loops over rows and columns (two views of every sample)."""
    import math

    views = torch.cat([z, z])
    labels = torch.cat([y, y])
    total = 0.0
    for protos in sets:
        rows = []
        for i in range(len(views)):
            anchor = protos[labels[i]]
            others = [j for j in range(len(views)) if j != i]
            denominator = sum(math.exp(float(anchor @ views[j]) / tau) for j in others)
            pos = [j for j in others if labels[j] == labels[i]]
            rows.append(-sum(float(anchor @ views[j]) / tau - math.log(denominator) for j in pos) / len(pos))
        total += sum(rows) / len(rows)
    return total


def test_fedpcl_official_loss_matches_a_loop_over_rows_and_skips_padding():
    from fedlib.losses import prototype_anchored_contrastive

    g = torch.Generator().manual_seed(0)
    z = torch.nn.functional.normalize(torch.randn(6, 4, generator=g), dim=1)
    y = torch.tensor([0, 1, 2, 0, 1, 1])
    sets = torch.nn.functional.normalize(torch.randn(3, 3, 4, generator=g), dim=2)
    ours = prototype_anchored_contrastive(z, Batch(None, y), sets, 0.5)
    assert abs(float(ours) - _official_loop(z, y, sets, 0.5)) < 1e-5
    # a zero-weight row (a padded batch of the batched executors) changes nothing
    padded = Batch(None, torch.cat([y, torch.tensor([2])]), torch.tensor([1.0] * 6 + [0.0]))
    z_padded = torch.cat([z, torch.nn.functional.normalize(torch.randn(1, 4, generator=g), dim=1)])
    assert torch.isclose(prototype_anchored_contrastive(z_padded, padded, sets, 0.5), ours, atol=1e-6)


def test_supervised_contrastive_by_hand():
    import math

    from fedlib.losses import supervised_contrastive

    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 0, 1])
    # anchors 0 and 1 have one positive each; anchor 2 has none and is skipped
    per = -(1.0 - math.log(math.exp(1.0) + math.exp(0.0)))
    assert math.isclose(float(supervised_contrastive(z, Batch(None, y), 1.0)), per, rel_tol=1e-6)


def test_losses_without_positives_or_prototypes_still_backpropagate():
    from fedlib.losses import prototype_distance, prototype_mse, supervised_contrastive

    z = torch.randn(3, 4, requires_grad=True)
    y = torch.tensor([0, 1, 2])  # no two samples share a label
    batch = Batch(None, y)
    for loss in (
        supervised_contrastive(z, batch, 0.1),
        prototype_mse(z, batch, None),
        prototype_distance(z, batch, None),
    ):
        assert float(loss.detach()) == 0.0
        loss.backward()


def random_psd(rng, n, rank=None, diag=0.0):
    F = rng.standard_normal((rank or n, n))
    return F.T @ F + diag * np.diag(rng.random(n))


def objective(Q, a):
    return float(a @ Q @ a)


def test_batched_simplex_qp_matches_cvxpy_reference():
    """Never a worse objective than the cvxpy reference; the same minimiser where it is unique
    (strongly convex problems); exact on diagonal problems (closed form 1/q normalised)."""
    from fedlib.aggregate import simplex_qp_batch

    rng = np.random.default_rng(0)
    strong = np.stack([random_psd(rng, 20, diag=0.5) for _ in range(6)])   # like FedPAC's diag(v) + D_i
    flat = np.stack([random_psd(rng, 20, rank=3, diag=1e-3) for _ in range(6)]
                    + [random_psd(rng, 60, rank=2, diag=1e-6)[:20, :20] for _ in range(3)])  # nearly singular
    diagonal = np.stack([np.diag(rng.random(20) + 0.1) for _ in range(3)])
    for Q in (strong, flat, diagonal):
        fast = simplex_qp_batch(Q, zero_below=0)
        for q, a in zip(Q, fast):
            ref = simplex_qp(q, zero_below=0)
            assert np.isclose(a.sum(), 1) and (a >= 0).all()
            assert objective(q, a) <= objective(q, ref) * (1 + 1e-6) + 1e-15
    assert (
        np.abs(simplex_qp_batch(strong, zero_below=0) - np.stack([simplex_qp(q, zero_below=0) for q in strong])).max()
        < 1e-4
    )
    for q, a in zip(diagonal, simplex_qp_batch(diagonal, zero_below=0)):
        d = np.diag(q)
        assert np.allclose(a, (1 / d) / (1 / d).sum(), atol=1e-9)


def test_batched_simplex_qp_satisfies_kkt():
    """At the optimum of min a^T Q a on the simplex: g = 2 Q a equals -nu on the support and is at
    least -nu off it (the multipliers of the bounds are non-negative)."""
    from fedlib.aggregate import simplex_qp_batch

    rng = np.random.default_rng(3)
    Q = np.stack([random_psd(rng, 12, rank=4, diag=1e-2) for _ in range(8)])
    for q, a in zip(Q, simplex_qp_batch(Q, zero_below=0)):
        g = 2 * q @ a / np.abs(np.linalg.eigvalsh(q)).max()
        support = a > 1e-9
        nu = -g[support].mean()
        assert np.abs(g[support] + nu).max() < 1e-6
        assert (g[~support] + nu >= -1e-6).all()


def test_difference_grams_against_loops():
    from fedlib.aggregate import difference_grams

    rng = np.random.default_rng(1)
    C = rng.standard_normal((4, 3, 2))
    p = rng.random((4, 3))
    G = difference_grams(C, p)
    for i in range(4):
        for a in range(4):
            for b in range(4):
                expected = sum(p[i, k] * (C[i, k] - C[a, k]) @ (C[i, k] - C[b, k]) for k in range(3))
                assert np.isclose(G[i, a, b], expected)


def test_fedpac_and_fedgpa_weights_equal_with_either_solver():
    g = torch.Generator().manual_seed(5)
    m, K, d = 8, 4, 6
    protos = torch.randn(m, K, d, generator=g)
    counts = torch.randint(0, 40, (m, K), generator=g).float()
    counts[:, 0] += 1
    var = torch.rand(m, generator=g) * 0.3 + 0.05
    row_by_row = lambda Q: np.stack([simplex_qp(q) for q in Q])  # noqa: E731
    for weights in (collaboration_weights, classifier_weights):
        assert np.abs(weights(protos, counts, var) - weights(protos, counts, var, solver=row_by_row)).max() < 1e-3
