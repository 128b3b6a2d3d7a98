"""Class prototypes by scatter ops (no Python loop over samples or classes)."""
from __future__ import annotations

import torch


def class_stats(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Per-class counts (K,), feature sums (K, d) and sums of squared norms (K,) = Trace(F_k^T F_k)."""
    counts = torch.bincount(y, minlength=num_classes).to(z.dtype)
    sums = torch.zeros(num_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, y, z)
    sq = torch.zeros(num_classes, dtype=z.dtype, device=z.device).index_add_(0, y, (z * z).sum(1))
    return counts, sums, sq


def class_means(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Prototypes C^(k) = mean of z over class k (zeros where a class is absent) and counts."""
    counts, sums, _ = class_stats(z, y, num_classes)
    return sums / counts.clamp_min(1).unsqueeze(1), counts


def batch_class_means(z: torch.Tensor, y: torch.Tensor, num_classes: int, weight: torch.Tensor | None = None):
    """Class means of one (possibly padded) mini-batch by a one-hot product, usable inside a loss
    that an executor vmaps over clients; zeros for classes absent from the batch."""
    onehot = (y.unsqueeze(-1) == torch.arange(num_classes, device=y.device)).to(z.dtype)   # (B, K)
    if weight is not None:
        onehot = onehot * weight.unsqueeze(-1)
    counts = onehot.sum(0)
    return (onehot.T @ z) / counts.clamp_min(1).unsqueeze(1), counts


def aggregate_prototypes(protos: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Count-weighted mean over clients: protos (m, K, d), counts (m, K) -> (K, d), present mask (K,).

    C_bar^(k) = sum_i |D_ik| C_i^(k) / sum_i |D_ik|  (FedGPA Eq. 4, FedProto, FedPCL Eq. 6 up to 1/|N_j|)."""
    total = counts.sum(0)
    weighted = (protos * counts.unsqueeze(-1)).sum(0) / total.clamp_min(1).unsqueeze(-1)
    return weighted, total > 0


def pad_prototypes(protos: torch.Tensor, counts: torch.Tensor, global_protos: torch.Tensor) -> torch.Tensor:
    """Replace the prototypes of classes a client lacks with the global ones (FedPCL Eq. 7)."""
    present = (counts > 0).unsqueeze(-1)
    return torch.where(present, protos, global_protos.expand_as(protos))


def feature_variance(counts: torch.Tensor, sq: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """Within-client feature variance (FedPAC; FedGPA Eq. 13 read with 1/|D_i| over the bracket):
    v = (1/n) [ sum_k p_k Tr(F_k^T F_k)/n_k - sum_k p_k^2 ||C^(k)||^2 ]."""
    n = counts.sum()
    p = counts / n
    return (( p * sq / counts.clamp_min(1)).sum() - (p * p * (means * means).sum(1)).sum()) / n


def clustered_prototypes(h: torch.Tensor, y: torch.Tensor, num_classes: int, clusters: int, repeats: int,
                         ratio: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """pFedCSPC Eq. 8-9: per present class, K-means (scikit-learn, k-means++, seeded) of its features into
    min(clusters, n_c) clusters; per cluster, ``repeats`` times the mean of a random ``ratio`` share
    (at least one, drawn without replacement) of its members. Returns (P, d) prototypes and (P,) labels.
    clusters = repeats = 1, ratio = 1: one class mean per class (FedProto's prototypes, "TPG")."""
    import warnings

    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(seed)
    feats = h.detach().cpu().double().numpy()
    labels = y.cpu().numpy()
    protos, owners = [], []
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        if len(members) == 0:
            continue
        k = min(clusters, len(members))
        if k == 1:
            assign = np.zeros(len(members), dtype=int)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)   # fewer distinct points than clusters
                km = KMeans(n_clusters=k, n_init=1, random_state=int(rng.integers(2 ** 31)))
                assign = km.fit_predict(feats[members])
        for j in range(k):
            cluster = members[assign == j]
            if len(cluster) == 0:
                continue
            take = max(1, int(np.ceil(ratio * len(cluster))))
            for _ in range(repeats):
                chosen = cluster if take >= len(cluster) else rng.choice(cluster, take, replace=False)
                protos.append(feats[chosen].mean(0))
                owners.append(c)
    return (torch.as_tensor(np.stack(protos), dtype=h.dtype, device=h.device),
            torch.as_tensor(owners, dtype=torch.long, device=h.device))


def in_client_augmentation(protos: torch.Tensor, labels: torch.Tensor, source: torch.Tensor, n_aug: int,
                           lambdas, gen: torch.Generator):
    """pFedCSPC Eq. 10: for each prototype u1, ``n_aug`` pairs u1+ = u1 + lam (u1 - u2) (u2 another prototype
    of the same class and client; u2 = u1 when there is none) and u1- = u1 + lam (u3 - u1) (u3 a prototype of
    another class of the same client), lam drawn from ``lambdas`` per pair. Returns positives, negatives
    (P, n_aug, d) and a (P, n_aug) mask of pairs that exist (a client with one class has no u3)."""
    P = len(protos)
    same_source = source.unsqueeze(0) == source.unsqueeze(1)
    same_class = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(P, dtype=torch.bool, device=protos.device)

    def draw(candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, n_aug) uniform picks among each row's candidates, and whether the row has any: the r-th
        candidate of a row, r uniform in [0, count), found in the row's running count."""
        running = candidates.long().cumsum(1)
        count = running[:, -1:]
        r = (torch.rand(P, n_aug, generator=gen, dtype=torch.float64).to(protos.device) * count).long()
        pick = torch.searchsorted(running, (r + 1).clamp_max(count.clamp_min(1)))
        return pick.clamp_max(P - 1), (count > 0).expand(P, n_aug)

    partner, has_partner = draw(same_source & same_class & ~eye)
    partner = torch.where(has_partner, partner, torch.arange(P, device=protos.device).unsqueeze(1))
    other, has_other = draw(same_source & ~same_class)
    lam_values = torch.as_tensor(list(lambdas), dtype=protos.dtype)
    lam = lam_values[torch.randint(len(lam_values), (P, n_aug), generator=gen)].to(protos.device).unsqueeze(-1)
    u1 = protos.unsqueeze(1)
    positives = u1 + lam * (u1 - protos[partner])
    negatives = u1 + lam * (protos[other] - u1)
    return positives, negatives, has_other


def mean_over_holders(values: torch.Tensor, labels: torch.Tensor, source: torch.Tensor, num_classes: int):
    """pFedCSPC Eq. 14/16: per class, the mean over the clients holding it of the mean of their vectors of
    that class. Returns (K, d) and the (K,) mask of classes some client holds."""
    sources = int(source.max()) + 1
    key = source * num_classes + labels
    counts = torch.bincount(key, minlength=sources * num_classes).to(values.dtype)
    sums = torch.zeros(sources * num_classes, values.shape[1], dtype=values.dtype, device=values.device)
    sums.index_add_(0, key, values)
    per_client = (sums / counts.clamp_min(1).unsqueeze(1)).view(sources, num_classes, -1)
    holds = (counts.view(sources, num_classes) > 0).to(values.dtype)
    holders = holds.sum(0)
    return (per_client * holds.unsqueeze(-1)).sum(0) / holders.clamp_min(1).unsqueeze(1), holders > 0
