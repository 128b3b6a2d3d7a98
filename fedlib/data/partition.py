"""Client partitions: pure, seeded functions ``labels, rng -> list of per-client index arrays``.

Every partitioner validates its arguments (ConfigError naming field, value and what is allowed),
never loops forever, and never gives one training sample to two clients.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedlib.errors import ConfigError, check, check_arguments, check_type


def _as_choices(value, name: str) -> list[int]:
    values = [value] if np.isscalar(value) else list(value)
    numbers = [v for v in values if isinstance(v, (int, float, np.integer, np.floating))]
    check(len(values) > 0 and len(numbers) == len(values) and all(int(v) == v and v > 0 for v in numbers), name, value,
          "a positive integer or a non-empty list of positive integers to draw from")
    return [int(v) for v in numbers]


def _split_evenly(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """``total`` split into ``parts`` integers differing by at most one (remainder to random parts)."""
    out = np.full(parts, total // parts, dtype=np.int64)
    out[rng.permutation(parts)[: total % parts]] += 1
    return out


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``weights`` that add up to ``total`` exactly."""
    weights = np.asarray(weights, dtype=np.float64)
    raw = weights / weights.sum() * total
    counts = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return counts


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


MAX_TRIES = 10_000   # Dirichlet redraws: beyond this an infeasible min_size would spin for hours


def dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float,
              min_size: int = 10, max_tries: int = 200) -> list[np.ndarray]:
    """Label skew: each class is split over clients with proportions ~ Dir(alpha).

    Clients that already hold N/num_clients samples get no more of later classes (the usual
    balancing rule); draws repeat until every client has ``min_size`` samples, at most
    ``max_tries`` times.
    """
    check(alpha > 0, "alpha", alpha, "a positive number (smaller is more skewed)")
    check(min_size >= 0, "min_size", min_size, "a non-negative integer")
    check(1 <= max_tries <= MAX_TRIES, "max_tries", max_tries,
          f"a number of Dirichlet draws in [1, {MAX_TRIES}] (each draw costs a pass over the labels)")
    check(min_size * num_clients <= len(labels), "min_size", min_size,
          f"at most {len(labels) // num_clients} for {num_clients} clients and {len(labels)} samples")
    classes = np.unique(labels)
    cap = len(labels) / num_clients
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(num_clients, alpha))
            p = p * np.array([len(part) < cap for part in parts])
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_size:
            return [np.sort(np.array(part, dtype=np.int64)) for part in parts]
    raise ConfigError("min_size", min_size,
                      f"no Dirichlet(alpha={alpha}) draw in {max_tries} tries gave every client that many "
                      f"samples; raise alpha (less skew) or lower the number of clients (or min_size)")


def dirichlet_blocks(labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float, block: int = 10,
                     min_share: float = 0.5, max_tries: int = MAX_TRIES) -> list[np.ndarray]:
    """Label skew as FedPRP's official code draws it (its Dataset/dataset.py: a FedDF-style Dirichlet split, then an
    equal re-cut): the shuffled samples are cut into one run per block of ``block`` clients; within a run each class
    is split over the block's clients with proportions ~ Dir(alpha) (a client already holding the run's mean share
    gets no more), redrawn until every client of the block holds ``min_share`` of that mean; the clients' samples, in
    order, are then concatenated and re-cut into ``num_clients`` equal contiguous parts. Unlike ``dirichlet`` over
    all clients at once, it can draw alpha = 0.05 over 100 clients (each client then holds one or two classes' worth
    of one run)."""
    check(alpha > 0, "alpha", alpha, "a positive number (smaller is more skewed)")
    check(block >= 1, "block", block, "a positive number of clients")
    check(0 <= min_share < 1, "min_share", min_share, "a share of a block's mean in [0, 1)")
    check(1 <= max_tries <= MAX_TRIES, "max_tries", max_tries, f"a number of Dirichlet draws in [1, {MAX_TRIES}]")
    order = rng.permutation(len(labels))
    blocks = [min(block, num_clients - start) for start in range(0, num_clients, block)]
    run = int(block / num_clients * len(labels))
    flat: list[int] = []
    for b, size in enumerate(blocks):
        idx = order[b * run: len(labels) if b == len(blocks) - 1 else (b + 1) * run]
        mean = len(idx) / size
        for _ in range(max_tries):
            parts: list[list[int]] = [[] for _ in range(size)]
            for c in np.unique(labels[idx]):
                members = idx[labels[idx] == c]
                p = rng.dirichlet(np.full(size, alpha)) * np.array([len(part) < mean for part in parts])
                p = p / p.sum() if p.sum() > 0 else np.full(size, 1 / size)
                for part, chunk in zip(parts, np.split(members, (np.cumsum(p) * len(members)).astype(int)[:-1])):
                    part.extend(chunk.tolist())
            if min(map(len, parts)) >= int(min_share * mean):
                break
        else:
            raise ConfigError("min_share", min_share, f"no Dirichlet(alpha={alpha}) draw in {max_tries} tries gave "
                                                      "every client of a block that share of its mean")
        flat.extend(i for part in parts for i in part)
    return [np.sort(part) for part in np.array_split(np.array(flat, dtype=np.int64), num_clients)]


def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
           classes_per_client: int) -> list[np.ndarray]:
    """Pathological label skew: each client holds exactly ``classes_per_client`` classes.

    Classes are dealt to clients so that every class has as equal a number of holders as
    possible; each class's samples are then cut into equal shards, one per holder.
    """
    classes = np.unique(labels)
    s = classes_per_client
    check(isinstance(s, (int, np.integer)) and 1 <= s <= len(classes), "s", s,
          f"an integer number of classes per client in [1, {len(classes)}]")
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    load = np.zeros(len(classes))
    for i in range(num_clients):
        # the s least-used classes, ties broken at random
        order = np.lexsort((rng.random(len(classes)), load))[:s]
        for j in order:
            holders[int(classes[j])].append(i)
            load[j] += 1
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c, who in holders.items():
        if not who:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for i, chunk in zip(who, np.array_split(idx, len(who))):
            parts[i].extend(chunk.tolist())
    return [np.sort(np.array(part, dtype=np.int64)) for part in parts]


def skew(labels: np.ndarray, num_clients: int, rng: np.random.Generator, s: float,
         n: int | Sequence[int], k: int | Sequence[int]) -> list[np.ndarray]:
    """FedPAC/FedGPA skew: s% of each client's n samples uniform over all classes, the rest
    split equally over k dominant classes drawn at random.

    ``n`` and ``k`` are fixed integers or lists to draw from per client (FedGPA Settings 2-3).
    Samples are drawn without replacement from the shared pool, so clients never overlap.
    """
    classes = np.unique(labels)
    check(0 <= s <= 100, "s", s, "a percentage in [0, 100]")
    n_choices, k_choices = _as_choices(n, "n"), _as_choices(k, "k")
    check(max(k_choices) <= len(classes), "k", k, f"at most the number of classes ({len(classes)})")
    pools = _class_pools(labels, rng)
    parts = []
    for _ in range(num_clients):
        n_i, k_i = int(rng.choice(n_choices)), int(rng.choice(k_choices))
        uniform = int(round(n_i * s / 100))
        counts = dict.fromkeys(pools, 0)
        for c, m in zip(classes, _split_evenly(uniform, len(classes), rng)):
            counts[int(c)] += int(m)
        dominant = rng.choice(classes, size=k_i, replace=False)
        for c, m in zip(dominant, _split_evenly(n_i - uniform, k_i, rng)):
            counts[int(c)] += int(m)
        parts.append(_take(pools, counts, n))
    return parts


def dirichlet_sized(labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float,
                    n: int | Sequence[int]) -> list[np.ndarray]:
    """Label skew at a fixed client size (FedGPA Appendix A.2, Table A.9): each client's class shares ~ Dir(alpha)
    over all classes, its ``n`` samples split over them by largest remainder and drawn without replacement from the
    shared pool (``dirichlet`` instead splits each class over the clients, so client sizes vary). ``n``: a fixed
    integer or a list to draw from per client."""
    check(alpha > 0, "alpha", alpha, "a positive number (smaller is more skewed)")
    n_choices = _as_choices(n, "n")
    pools = _class_pools(labels, rng)
    parts = []
    for _ in range(num_clients):
        n_i = int(rng.choice(n_choices))
        shares = rng.dirichlet(np.full(len(pools), float(alpha)))
        parts.append(_take(pools, dict(zip(pools, (int(m) for m in largest_remainder(shares, n_i)))), n))
    return parts


def _class_pools(labels: np.ndarray, rng: np.random.Generator) -> dict[int, list[int]]:
    """{class: its sample indices in random order}: the shared pool that ``_take`` draws clients from."""
    return {int(c): list(rng.permutation(np.flatnonzero(labels == c))) for c in np.unique(labels)}


def _take(pools: dict[int, list[int]], counts: dict[int, int], n) -> np.ndarray:
    """A client's samples: the first ``counts[c]`` left in each class's pool, removed from it (no two clients share
    a sample); ``n`` names the size that ran a pool out."""
    part: list[int] = []
    for c, m in counts.items():
        if m > len(pools[c]):
            raise ConfigError("n", n, f"the pool of class {c} ran out ({len(pools[c])} left, {m} needed): "
                                      f"use fewer clients or a smaller n")
        part += pools[c][:m]
        del pools[c][:m]
    return np.sort(np.array(part, dtype=np.int64))


def domains(labels: np.ndarray, num_clients: int, rng: np.random.Generator, domains: np.ndarray,
            alpha: float | None = None, min_size: int = 2) -> list[np.ndarray]:
    """Feature shift (FedPCL): every client holds one domain; a domain's samples are split over its
    num_clients / D clients iid, or with Dirichlet(alpha) label skew (feature & label shift)."""
    names = np.unique(domains)
    check(num_clients % len(names) == 0, "num_clients", num_clients,
          f"a multiple of the number of domains ({len(names)}) for the 'domains' partition")
    per = num_clients // len(names)
    parts = []
    for d in names:
        idx = np.flatnonzero(domains == d)
        if alpha is None:
            sub = iid(labels[idx], per, rng)
        else:
            sub = dirichlet(labels[idx], per, rng, alpha=alpha, min_size=min_size)
        parts += [idx[s] for s in sub]
    return parts


def long_tail(labels: np.ndarray, rng: np.random.Generator, imbalance: float) -> np.ndarray:
    """Global long tail (FedPRP V-A): keep n_c = n_max * gamma^(r_c/(K-1)) samples of the class
    of rank r_c (classes ranked in label order), so min/max count = gamma. Returns kept indices."""
    check(0 < imbalance <= 1, "imbalance", imbalance, "a ratio gamma = n_min/n_max in (0, 1]")
    classes = np.unique(labels)
    n_max = min(int((labels == c).sum()) for c in classes)
    keep = []
    for rank, c in enumerate(classes):
        n_c = max(1, int(n_max * imbalance ** (rank / max(len(classes) - 1, 1))))
        keep.append(rng.permutation(np.flatnonzero(labels == c))[:n_c])
    return np.sort(np.concatenate(keep))


FEDGPA_SETTINGS = {
    # dataset group -> setting -> (n choices, k choices), FedGPA Section 5.1.2
    "small": {1: (600, 5), 2: (600, [3, 4, 5, 6, 7]), 3: ([300, 900, 1500], [3, 4, 5, 6, 7])},
    "cifar100": {1: (1200, 50), 2: (1200, list(range(30, 71, 5))), 3: ([900, 1500, 2100], list(range(30, 71, 5)))},
    "emnist": {1: (1200, 31), 2: (1200, list(range(18, 43, 3))), 3: ([900, 1500, 2100], list(range(18, 43, 3)))},
}


def fedgpa_setting(setting: int, num_classes: int) -> dict:
    """n and k of FedGPA's Data Heterogeneity Settings 1-3 for a dataset with ``num_classes``."""
    check(setting in (1, 2, 3), "setting", setting, "1, 2 or 3 (FedGPA Section 5.1.2)")
    group = {100: "cifar100", 62: "emnist"}.get(num_classes, "small")
    n, k = FEDGPA_SETTINGS[group][setting]
    return {"n": n, "k": k}


@dataclass(frozen=True)
class Partitioner:
    name: str
    fn: Callable
    params: dict = field(default_factory=dict)  # name -> description
    doc: str = ""


PARTITIONERS: dict[str, Partitioner] = {
    "iid": Partitioner("iid", iid, {}, "uniform random split"),
    "dirichlet": Partitioner(
        "dirichlet",
        dirichlet,
        {"alpha": "concentration > 0", "min_size": "min samples per client (10)"},
        "label skew, class proportions ~ Dir(alpha)",
    ),
    "dirichlet_blocks": Partitioner(
        "dirichlet_blocks",
        dirichlet_blocks,
        {"alpha": "concentration > 0", "block": "clients per Dirichlet draw (10)",
         "min_share": "min share of a block's mean per client (0.5)"},
        "label skew as FedPRP's official code draws it: Dir(alpha) within blocks of clients, then equal parts",
    ),
    "shards": Partitioner(
        "shards", shards, {"s": "classes per client in [1, K]"}, "pathological: s classes per client"
    ),
    "dirichlet_sized": Partitioner(
        "dirichlet_sized",
        dirichlet_sized,
        {"alpha": "concentration > 0", "n": "samples per client (int or list)"},
        "label skew at a fixed client size: each client's class shares ~ Dir(alpha) (FedGPA Table A.9)",
    ),
    "domains": Partitioner(
        "domains",
        domains,
        {
            "alpha": "None (iid within a domain) or Dirichlet alpha > 0",
            "min_size": "min samples per client with alpha (2)",
        },
        "feature shift: one domain per client (datasets with domains, e.g. digit4)",
    ),
    "skew": Partitioner(
        "skew",
        skew,
        {
            "s": "uniform share in [0, 100]",
            "n": "samples per client (int or list)",
            "k": "dominant classes (int or list)",
            "setting": "FedGPA setting 1|2|3 (fills n, k)",
        },
        "FedPAC/FedGPA: s% uniform + dominant classes",
    ),
}
COMMON_PARAMS = {
    "imbalance": "global long-tail ratio gamma in (0, 1] applied first (FedPRP)",
    "test_fraction": "local test size / local train size (0.25)",
    "server": "training samples per class held out, balanced, for the server (FEDIC; 0)",
    "per_class": "keep at most this many training samples per class before the long tail (smaller runs)",
    "repeat": "ratio r in [0, 1): r of the clients get r of their samples replaced by copies of one of them "
    "(FedMate Fig. 5)",
}


def server_split(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """``per_class`` random training samples of every class, for a server-side auxiliary set."""
    check(isinstance(per_class, (int, np.integer)) and per_class >= 0, "server", per_class,
          "a non-negative number of samples per class")
    classes = np.unique(labels)
    smallest = min(int((labels == c).sum()) for c in classes)
    check(per_class < smallest, "server", per_class, f"fewer than the smallest class ({smallest} samples)")
    return np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in classes]))


def partition(labels: np.ndarray, num_classes: int, num_clients: int, spec: dict, seed: int,
              domain_ids: np.ndarray | None = None) -> list[np.ndarray]:
    """Dispatch a partition spec such as ``{"name": "skew", "s": 20, "setting": 1}``."""
    return partition_with_server(labels, num_classes, num_clients, spec, seed, domain_ids)[0]


def partition_with_server(labels: np.ndarray, num_classes: int, num_clients: int, spec: dict, seed: int,
                          domain_ids: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Client index arrays and the server's held-out indices (empty unless ``server`` > 0): the
    server's balanced set is drawn first, the long tail and the clients' partition from the rest."""
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in PARTITIONERS:
        raise ConfigError("partition.name", name, f"one of {', '.join(PARTITIONERS)}")
    check(isinstance(num_clients, (int, np.integer)) and num_clients >= 1, "num_clients", num_clients,
          "a positive integer")
    check(num_clients <= len(labels), "num_clients", num_clients,
          f"at most the number of training samples ({len(labels)})")
    spec.pop("test_fraction", None)
    for key, annotation in (("repeat", float), ("server", int), ("per_class", int), ("imbalance", float)):
        if spec.get(key) is not None:
            check_type(f"partition.{key}", spec[key], annotation)
    repeat = spec.pop("repeat", 0)
    check(isinstance(repeat, (int, float)) and 0 <= repeat < 1, "repeat", repeat, "a ratio in [0, 1)")
    rng = np.random.default_rng(seed)
    pool = np.arange(len(labels))
    held = np.zeros(0, dtype=np.int64)
    per_class = spec.pop("server", 0)
    if per_class:
        held = server_split(labels, per_class, rng)
        pool = np.setdiff1d(pool, held)
    cap = spec.pop("per_class", None)
    if cap is not None:
        check(
            isinstance(cap, (int, np.integer)) and cap >= 1, "per_class", cap, "a positive number of samples per class"
        )
        pool = np.sort(
            np.concatenate([rng.permutation(pool[labels[pool] == c])[:cap] for c in np.unique(labels[pool])])
        )
    imbalance = spec.pop("imbalance", None)
    if imbalance is not None:
        pool = pool[long_tail(labels[pool], rng, imbalance)]
    if name == "skew" and "setting" not in spec and not {"n", "k"} <= set(spec):
        raise ConfigError("partition.setting", None, "setting=1|2|3 (FedGPA) or both n and k for the 'skew' partition")
    if name == "skew" and "setting" in spec:
        spec.update({k: v for k, v in fedgpa_setting(spec.pop("setting"), num_classes).items() if k not in spec})
    if name == "shards":
        spec["classes_per_client"] = spec.pop("s", spec.get("classes_per_client"))
    if name == "domains":
        if domain_ids is None:
            raise ConfigError("partition.name", name, "a dataset with domains (digit4) for 'domains'")
        spec["domains"] = domain_ids[pool]
    allowed = set(PARTITIONERS[name].params) | {"classes_per_client", "max_tries", "domains"}
    for key in spec:
        check(key in allowed, f"partition.{key}", spec[key],
              f"a parameter of '{name}': {', '.join(sorted(PARTITIONERS[name].params)) or 'none'}")
    check_arguments(PARTITIONERS[name].fn, {k: v for k, v in spec.items() if k != "domains"}, "partition.")
    try:
        parts = PARTITIONERS[name].fn(labels[pool], num_clients, rng, **spec)
    except TypeError as exc:
        raise ConfigError(f"partition.{name}", spec, f"parameters {PARTITIONERS[name].params} ({exc})") from None
    parts = [pool[p] for p in parts]
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    check(
        not empty, "num_clients", num_clients, f"a number that leaves no client empty (clients {empty[:5]} got no data)"
    )
    if repeat:
        parts = repeated(parts, repeat, rng)
    return parts, held


def repeated(parts: list[np.ndarray], ratio: float, rng: np.random.Generator) -> list[np.ndarray]:
    """FedMate Fig. 5 (repeat ratio): in round(ratio * m) clients, round(ratio * n_i) of the client's
    samples are replaced by copies of one of its samples (on purpose, a client then holds repeats)."""
    parts = [p.copy() for p in parts]
    for i in rng.choice(len(parts), size=int(round(ratio * len(parts))), replace=False):
        p = parts[i]
        k = int(round(ratio * len(p)))
        if k and len(p) > 1:
            source = rng.integers(len(p))
            others = np.delete(np.arange(len(p)), source)
            p[rng.choice(others, size=min(k, len(others)), replace=False)] = p[source]   # k + 1 copies of one sample
            parts[i] = np.sort(p)
    return parts


def local_test_indices(test_labels: np.ndarray, train_counts: np.ndarray, fraction: float,
                       seed: int, test_domains: np.ndarray | None = None,
                       client_domains: list | None = None) -> list[np.ndarray]:
    """Per-client test sets drawn from the global test set with the client's training label
    distribution: size = round(fraction * n_i), classes by largest remainder, no repeats within a
    client (clients may share test samples). A client whose training data comes from one domain
    (``client_domains[i]`` not None) draws only test samples of that domain."""
    check(0.01 <= fraction <= 10, "test_fraction", fraction, "a ratio of local test to train size in [0.01, 10]")
    rng = np.random.default_rng(seed)
    K = train_counts.shape[1]
    out = []
    for i, counts in enumerate(train_counts):
        pool = np.ones(len(test_labels), dtype=bool)
        if client_domains is not None and client_domains[i] is not None:
            pool = test_domains == client_domains[i]
        by_class = [np.flatnonzero(pool & (test_labels == c)) for c in range(K)]
        need = largest_remainder(counts, max(1, int(round(fraction * counts.sum()))))
        part = [rng.choice(by_class[c], size=min(m, len(by_class[c])), replace=False)
                for c, m in enumerate(need) if m > 0]
        out.append(np.sort(np.concatenate(part)).astype(np.int64))
    return out


def majority_share(train_counts, fraction: float = 0.25) -> np.ndarray:
    """Per client, the share of its local test set (``local_test_indices``'s allocation: round(fraction n_i) images
    split over its classes by largest remainder) that its most frequent class holds: the accuracy of always
    predicting the client's majority class there."""
    shares = []
    for counts in np.asarray(train_counts):
        need = largest_remainder(counts, max(1, int(round(fraction * counts.sum()))))
        shares.append(need.max() / need.sum())
    return np.asarray(shares)


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Client x class matrix of sample counts."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
