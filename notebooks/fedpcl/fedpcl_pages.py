"""The FedPCL page's own tables and figures (notebooks/fedpcl/fedpcl.ipynb reads them as pages): the domains and the
backbones' sanity checks, the smoke runs of Tables 1, 2 and 4-6, the label-shift sweeps and the noise sweep with
their rows and plots, the backbones' similarity. What the chapter declares (its budgets, grids, claims and
inventory) is fedpcl; its investigation of the printed objective is fedpcl_readings; this module only runs, reads
and shows."""
from __future__ import annotations

from typing import Any

import numpy as np
from fedlib.studies.fedpcl import (
    BACKBONE_SETS,
    LABELS,
    MULTI,
    NAMES_T5,
    PAPER_T1,
    PAPER_T2,
    PAPER_T5,
    PAPER_T6,
    SCALES,
    SETTINGS,
    VARIANTS_T6,
    config,
    label_shift_grid,
    noise_grid,
    table2_grid,
    table4_grid,
    table5_grid,
    table6_grid,
    tables,
)

from fedlib.plots import chance_line
from fedlib.studies.common import ON_CPU, Runtime, fmt, mean_std, run_all, run_grid, with_seeds


def plot_domains(data):
    """One training image per class and domain, and the images per domain: (figure, counts table)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from fedlib.data.domains import DOMAIN_LABELS, DOMAINS

    fig, axes = plt.subplots(len(DOMAINS), 10, figsize=(10, 4.4))
    for r, name in enumerate(DOMAINS):
        idx = (data.train_domain == r).nonzero().flatten()
        for c in range(10):
            i = idx[data.train_y[idx] == c][0]
            axes[r, c].imshow(data.train_x[i].permute(1, 2, 0).numpy())
            axes[r, c].axis("off")
        axes[r, 0].set_title(DOMAIN_LABELS[name], fontsize=8, loc="left")
    fig.tight_layout()
    counts = pd.DataFrame({DOMAIN_LABELS[n]: [int((data.train_domain == d).sum()), int((data.test_domain == d).sum())]
                           for d, n in enumerate(DOMAINS)}, index=["train", "test"])
    return fig, counts.rename_axis("images")


def backbone_checks(data) -> tuple[list[dict], list[dict]]:
    """Sanity of the shipped weights: the EfficientNets' top-1 ImageNet class of two photos, and each
    ccexam digit classifier's accuracy (%) on each domain's test images."""
    from importlib.resources import files as resource_files

    import ccexam.models as M
    import skimage.data as skd
    import torch
    import torchvision

    from fedlib.backbones import _ccexam_prepare, _effnet_prepare, imagenet_classifier
    from fedlib.data.domains import DOMAIN_LABELS, DOMAINS

    categories = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"]  # class names, no weights
    photos = {"chelsea (a cat)": skd.chelsea(), "coffee (a cup)": skd.coffee()}
    imagenet = []
    for v in (0, 1, 2):
        net = imagenet_classifier(v)
        for name, img in photos.items():
            x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255
            with torch.no_grad():
                p = net(_effnet_prepare()(x, 224)).softmax(1)
            imagenet.append({"backbone": f"EfficientNet-Lite{v}", "photo": name,
                             "top-1 ImageNet class": categories[int(p.argmax())]})
    digits = []
    for ds, (cls, size) in {"mnist": (M.MNISTNet, 28), "usps": (M.USPSNet, 16), "svhn": (M.SVHNNet, 32)}.items():
        net = cls(input_size=size)
        net.load_state_dict(torch.load(str(resource_files("ccexam") / "weights" / f"{ds}.pth"), map_location="cpu",
                                       weights_only=True))
        net.eval()
        row: dict[str, Any] = {"ccexam classifier": ds.upper()}
        for d, name in enumerate(DOMAINS):
            m = data.test_domain == d
            with torch.no_grad():
                pred = net(_ccexam_prepare(ds)(data.test_x[m])).argmax(1)
            row[DOMAIN_LABELS[name]] = round(100 * float((pred == data.test_y[m]).float().mean()), 1)
        digits.append(row)
    return imagenet, digits


def table2(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """Table 2: {(backbones "s"|"m", method): records over the headline seeds}."""
    return run_grid(table2_grid(scale), desc="Table 2", store=store, runtime=runtime)


def table2_rows(runs: dict) -> list[dict]:
    """Accuracy per domain, mean (std) over seeds, the average, and what each client uploads; the paper beside."""

    from fedlib.data.domains import DOMAIN_LABELS, DOMAINS

    rows = []
    for (bb, m), recs in runs.items():
        per_client = np.array([r["final"]["personal_local_acc_clients"] for r in recs]) * 100  # seeds x domains
        row: dict[str, Any] = {"BB": bb, "method": LABELS[m]}
        for d, name in enumerate(DOMAINS):
            row[DOMAIN_LABELS[name]] = f"{per_client[:, d].mean():.2f} ({per_client[:, d].std():.2f})"
        row["avg (4 domains)"] = fmt(mean_std(recs))
        up = recs[0]["history"][-1]["uploaded_per_client"]
        row["comm params"] = f"{int(up):,}" if up else "-"
        p = PAPER_T2[m][bb]
        row["paper MNIST / MNIST-M / Synth"] = f"{p[0]:.2f} / {p[1]:.2f} / {p[2]:.2f}"
        row["paper avg (5 domains)"] = p[3]
        row["paper comm"] = f"{p[4]:,}" if p[4] else "-"
        rows.append(row)
    return rows


def label_shift(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[dict, dict, dict]:
    """Label shift on digit4 (cf. Fig. 3): FedPCL, FedRep and Solo against Dirichlet alpha (10 clients), FedPCL
    and FedAvg against the number of clients (alpha = 1). Returns ({method: {alpha: ms}}, {method: {clients: ms}},
    every run)."""
    runs = run_grid(label_shift_grid(scale), desc="label shift", progress=False, store=store, runtime=runtime)
    return *label_shift_points(runs), runs


def label_shift_points(runs: dict) -> tuple[dict, dict]:
    """The label-shift runs as ({method: {alpha: ms}}, {method: {clients: ms}})."""
    by: dict[str, dict] = {"alpha": {}, "clients": {}}
    for (kind, m, x), recs in runs.items():
        by[kind].setdefault(m, {})[x] = mean_std(recs)
    return by["alpha"], by["clients"]


def label_shift_lines(alpha_res: dict, client_res: dict) -> list[str]:
    """One line per method and sweep: its accuracy at each alpha, then at each number of clients m."""
    return [f"{LABELS[m]:7s} " + ", ".join(f"{name}={x}: {fmt(ms)}" for x, ms in points.items())
            for name, res in (("alpha", alpha_res), ("m", client_res)) for m, points in res.items()]


def plot_label_shift(alpha_res: dict, client_res: dict, scale: str):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, res in zip(axes, (alpha_res, client_res)):
        for m, points in res.items():
            xs = list(points)
            ax.errorbar(xs, [100 * points[x][0] for x in xs], yerr=[100 * points[x][1] for x in xs], marker="o",
                        capsize=3, label=LABELS[m])
        ax.set_xscale("log")
        ax.legend()
        ax.grid(alpha=0.3)
    axes[0].set_xlabel("Dirichlet alpha (10 clients)")
    axes[0].set_ylabel("accuracy (%)")
    axes[1].set_xlabel("number of clients (alpha = 1)")
    for ax in axes:
        chance_line(ax)
    fig.suptitle(f"label shift on digit4, scale {scale}, seeds {SCALES[scale].sweep_seeds}")
    fig.tight_layout()
    return fig


def table4(scale: str, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table 4 analogue: FedPCL with other sets of frozen backbones (feature & label shift)."""
    from fedlib.backbones import BACKBONES

    runs = run_grid(table4_grid(scale), desc="Table 4", progress=False, runtime=runtime)
    rows = [{"backbones": name, "feature dim": sum(BACKBONES[b].dim for b in BACKBONE_SETS[name]),
             "FedPCL acc": fmt(mean_std(recs))} for name, recs in runs.items()]
    return rows, runs


def table5(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict, dict]:
    """Table 5 analogue: FedPCL's loss replaced (feature & label shift). Returns (rows, {loss: ms}, runs)."""
    runs = run_grid(table5_grid(scale), desc="Table 5", progress=False, store=store, runtime=runtime)
    return table5_rows(runs, scale), {loss: mean_std(recs) for loss, recs in runs.items()}, runs


def table5_rows(runs: dict, scale: str) -> list[dict]:
    return [{"loss": NAMES_T5[loss], f"ours ({scale})": fmt(mean_std(recs)), "paper": PAPER_T5.get(loss, "-")}
            for loss, recs in runs.items()]


def table6(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict, dict]:
    """Table 6 analogue: global and/or local prototypes in each setting. Returns (rows, {variant: {setting:
    ms}}, runs)."""
    runs = run_grid(table6_grid(scale), desc="Table 6", progress=False, store=store, runtime=runtime)
    t6 = {label: {setting: mean_std(runs[(label, setting)]) for setting in SETTINGS} for label in VARIANTS_T6}
    return table6_rows(runs), t6, runs


def table6_rows(runs: dict) -> list[dict]:
    """Table 6 from its runs {(variant, setting): records}: ours per setting (mean ± std over seeds; '-' where a
    cell has no record) beside the paper's."""
    rows = []
    for label in VARIANTS_T6:
        row: dict[str, Any] = {"prototypes": label}
        for k, setting in enumerate(SETTINGS):
            row[setting] = fmt(mean_std(runs[(label, setting)])) if runs.get((label, setting)) else "-"
            row[f"paper: {setting}"] = PAPER_T6[label][k]
        rows.append(row)
    return rows


def paper_scale_runs(table: str) -> dict | None:
    """The committed paper-scale records of ``table`` (a name of ``tables``) {cell: records}, or None until every
    cell has its seeds."""
    from fedlib.studies.common import complete_runs

    return complete_runs("fedpcl", tables("paper")[table])


def plot_backbone_similarity(scale: str, runtime: Runtime = ON_CPU):
    """Fig. 5 analogue: per client, how close the prototypes made from one backbone's features alone are to
    the fused prototypes (cosine, normalised over backbones), after a FedPCL run under feature shift."""
    import matplotlib.pyplot as plt
    import torch

    from fedlib.backbones import BACKBONES
    from fedlib.data.domains import DOMAIN_LABELS, DOMAINS
    federation = runtime.trained(config("fedpcl", "feature shift", MULTI, scale))
    fed = federation.data
    dims = np.cumsum([0] + [BACKBONES[b].dim for b in MULTI])
    S = np.zeros((len(MULTI), fed.num_clients))
    for c in federation.clients:
        x, y = fed.data.train_x[fed.train_idx[c.id]], fed.data.train_y[fed.train_idx[c.id]]
        fused = federation.trainer.features(c.model, x).z
        Cf = torch.zeros(10, fused.shape[1]).index_add_(0, y, fused)
        for k in range(len(MULTI)):
            xk = torch.zeros_like(x)
            xk[:, dims[k]:dims[k + 1]] = x[:, dims[k]:dims[k + 1]]
            zk = federation.trainer.features(c.model, xk).z
            Ck = torch.zeros(10, zk.shape[1]).index_add_(0, y, zk)
            S[k, c.id] = float(torch.nn.functional.cosine_similarity(Ck, Cf, dim=1).mean())
    S = S / S.sum(0, keepdims=True)
    fig, ax = plt.subplots(figsize=(5.5, 2.8))
    im = ax.imshow(S, cmap="viridis")
    ax.set_yticks(range(len(MULTI)), [f"EffNet-Lite{k}" for k in range(3)])
    ax.set_xticks(range(fed.num_clients), [DOMAIN_LABELS[DOMAINS[d]] for d in fed.client_domains], rotation=20)
    for (i, j), v in np.ndenumerate(S):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, ax=ax)
    ax.set_title("normalised similarity of backbone-only to fused prototypes")
    fig.tight_layout()
    return fig


def noise_sweep(scale: str, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """FedPCL (official code's loss) with Gaussian noise of std sigma added to the uploaded prototypes."""
    runs = run_grid(noise_grid(scale), desc="noise", progress=False, runtime=runtime)
    return [{"noise std": s, "FedPCL acc": fmt(mean_std(recs))} for s, recs in runs.items()], runs


def table1(table2_runs: dict, scale: str, runtime: Runtime = ON_CPU) -> tuple[list[dict], list]:
    """Table 1 analogue: FedAvg from scratch (cnn3) against FedAvg on 1 and 3 frozen backbones."""

    seeds = SCALES[scale].seeds
    scratch = run_all(with_seeds(config("fedavg", "feature shift", None, scale, model="cnn3"), seeds), progress=False,
                      runtime=runtime)
    modes = (("from scratch (cnn3)", scratch, "from scratch (ResNet18)"),
             ("1 frozen backbone", table2_runs[("s", "fedavg")], "1 pre-trained model"),
             ("3 frozen backbones", table2_runs[("m", "fedavg")], "3 pre-trained models"))
    rows = []
    for label, recs, key in modes:
        r0 = recs[0]
        rows.append({"mode": label, "rounds": r0["config"]["rounds"],
                     "params sent / client / round": int(r0["history"][-1]["uploaded_per_client"]),
                     "s / round": round(np.mean([r["wall_time_s"] / r["config"]["rounds"] for r in recs]), 2),
                     "acc": fmt(mean_std(recs)), "paper: trained params": PAPER_T1[key][0],
                     "paper: s / round": PAPER_T1[key][1], "paper: acc @50 rounds": PAPER_T1[key][2]})
    return rows, [recs for _, recs, _ in modes]


def table1_note(rows: list[dict]) -> str:
    """What Table 1's numbers say about cost, read from its rows: whether the frozen backbones send fewer numbers
    than training from scratch (the paper's point), and why not where they do not."""
    sent = {r["mode"]: r["params sent / client / round"] for r in rows}
    scratch = next(v for k, v in sent.items() if k.startswith("from scratch"))
    frozen = {k: v for k, v in sent.items() if not k.startswith("from scratch")}
    more = [k for k, v in frozen.items() if v > scratch]
    text = "FedAvg, feature shift, 4 clients; time per round includes evaluation"
    if more:
        counts = ", ".join(f"{frozen[k]:,}" for k in more)
        text += (f". Here {' and '.join(more)} send more numbers per round ({counts})"
                 f" than training from scratch ({scratch:,}): our from-scratch model is a small CNN, not the paper's "
                 "ResNet-18 (11M parameters), while the projection network's first layer takes every backbone "
                 "feature (1,280 per EfficientNet-Lite backbone) to 256; against a ResNet-18 the frozen backbones "
                 "would send far fewer, as the paper reports")
    return text
