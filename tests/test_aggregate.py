import numpy as np
import torch
from scipy.optimize import minimize

from fedlib.aggregate import mix, simplex_qp, weighted_average
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
        obj = lambda a: ((h[i] - np.tensordot(a, h, 1)) ** 2).sum() + (a ** 2 * var.numpy()).sum()  # noqa: E731
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
    assert math.isclose(float(prototype_contrastive(z, y, C, 0.5)), expected, rel_tol=1e-6)
    two = torch.stack([C, C.flip(0)])
    mean_of_sets = (prototype_contrastive(z, y, C, 0.5) + prototype_contrastive(z, y, C.flip(0), 0.5)) / 2
    assert torch.isclose(prototype_contrastive(z, y, two, 0.5), mean_of_sets)


def test_supervised_contrastive_by_hand():
    import math

    from fedlib.losses import supervised_contrastive

    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 0, 1])
    # anchors 0 and 1 have one positive each; anchor 2 has none and is skipped
    per = -(1.0 - math.log(math.exp(1.0) + math.exp(0.0)))
    assert math.isclose(float(supervised_contrastive(z, y, 1.0)), per, rel_tol=1e-6)


def test_losses_without_positives_or_prototypes_still_backpropagate():
    from fedlib.losses import prototype_distance, prototype_mse, supervised_contrastive

    z = torch.randn(3, 4, requires_grad=True)
    y = torch.tensor([0, 1, 2])  # no two samples share a label
    for loss in (supervised_contrastive(z, y, 0.1), prototype_mse(z, y, None), prototype_distance(z, y, None)):
        assert float(loss.detach()) == 0.0
        loss.backward()
