"""Train many clients at once on one device with torch.func: vmap over stacked parameters.

Clients of a phase are grouped by the structure of what their loss reads (received message,
private state), then bucketed by number of steps. A bucket runs its longest client's steps; shorter
clients are masked once they are done, and every epoch's last partial batch is padded to the batch
size with zero-weight samples (losses reduce with ``batch_mean``). Sample orders are the sequential
executor's, the optimizers follow torch.optim's update formulas, and nothing synchronises with the
host until the phase ends.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch.func import functional_call, grad_and_value, vmap
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from fedlib.engine.core import Batch, ClientContext, Out, Params, Phase
from fedlib.engine.training import OptimizerSpec, epoch_orders, full_batches, step_scope
from fedlib.models import SplitModel, network_params, part_of


# ---------------------------------------------------------------------- functional optimizers
class FunctionalOptimizer:
    """SGD (momentum, weight decay) and Adam as pure updates of stacked tensors, written with the
    same operations as torch.optim's single-tensor implementations, applied to all parameters at once
    with ``torch._foreach_*`` (a few fused kernels per step on a GPU instead of a few per parameter;
    on the CPU the same per-tensor arithmetic)."""

    def __init__(self, spec: OptimizerSpec, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.spec, self.lr, self.betas, self.eps = spec, lr, betas, eps
        self.step_count = 0

    def init(self, params: dict) -> dict:
        if self.spec.kind == "adam":
            return {k: (torch.zeros_like(v), torch.zeros_like(v)) for k, v in params.items()}
        return {k: None for k in params}

    def update(self, params: dict, grads: dict, state: dict, unused=frozenset()) -> tuple[dict, dict]:
        """One step; parameters in ``unused`` (the loss does not reach them) are left as they are, as
        torch.optim leaves parameters whose gradient is None (no weight decay either)."""
        self.step_count += 1
        keys = [k for k in params if k not in unused]
        new_p = {k: params[k] for k in unused if k in params}
        new_s = {k: state[k] for k in unused if k in params}
        if not keys:
            return {**params, **new_p}, {**state, **new_s}
        p = [params[k] for k in keys]
        g = [grads[k] for k in keys]
        if self.spec.weight_decay != 0:
            g = list(torch._foreach_add(g, p, alpha=self.spec.weight_decay))
        if self.spec.kind == "adam":
            b1, b2 = self.betas
            m = torch._foreach_lerp([state[k][0] for k in keys], g, 1 - b1)
            v = torch._foreach_mul([state[k][1] for k in keys], b2)
            torch._foreach_addcmul_(v, g, g, value=1 - b2)
            step_size = self.lr / (1 - b1 ** self.step_count)
            denom = torch._foreach_div(torch._foreach_sqrt(v), math.sqrt(1 - b2 ** self.step_count))
            torch._foreach_add_(denom, self.eps)
            updated = torch._foreach_addcdiv(p, m, denom, value=-step_size)
            moments: list = list(zip(m, v))
        else:
            moments = [state[k] for k in keys]
            if self.spec.momentum != 0:
                if moments[0] is None:   # the first step: every buffer starts as the gradient
                    moments = [x.clone() for x in g]
                else:
                    moments = list(torch._foreach_mul(moments, self.spec.momentum))
                    torch._foreach_add_(moments, g)
                g = moments
            updated = torch._foreach_add(p, g, alpha=-self.lr)
        new_p.update(zip(keys, updated))
        new_s.update(zip(keys, moments))
        return {k: new_p[k] for k in params}, {k: new_s[k] for k in params}


def _where(mask: torch.Tensor, new, old):
    if new is None:
        return None
    if isinstance(new, tuple):
        return tuple(_where(mask, a, b) for a, b in zip(new, old))
    if old is None:
        return new
    return torch.where(mask.view(-1, *([1] * (new.ndim - 1))), new, old)


# ---------------------------------------------------------------------- grouping and bucketing
def structure_key(tree) -> tuple:
    """Clients can share one vmap when their trees have the same structure, the same constants and
    tensors of the same shapes."""
    leaves, spec = tree_flatten(tree)
    sig = tuple(("T", tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else ("C", repr(v)) for v in leaves)
    return (repr(spec), sig)


def buckets(steps: list[int], overhead: float) -> list[list[int]]:
    """Split clients (by position) into buckets minimising sum over buckets of
    max_steps x (overhead + clients), the cost of running a bucket in lockstep (dynamic programme
    over clients sorted by steps)."""
    order = sorted(range(len(steps)), key=lambda i: -steps[i])
    s = [steps[i] for i in order]
    m = len(s)
    best = [0.0] + [math.inf] * m
    cut = [0] * (m + 1)
    for b in range(1, m + 1):
        for a in range(b):
            cost = best[a] + s[a] * (overhead + b - a)
            if cost < best[b]:
                best[b], cut[b] = cost, a
    out, b = [], m
    while b > 0:
        out.append(order[cut[b]:b])
        b = cut[b]
    return out[::-1]


_TENSOR = object()   # marks a tensor slot among the constant leaves


def _stack_leaves(trees: list) -> tuple[TreeSpec, list, list, list]:
    """(spec, constant leaves by position, tensor inputs, their vmap in_dims): a tensor that is the
    very same object for every client is passed once (in_dim None), others are stacked (in_dim 0)."""
    flats = [tree_flatten(t) for t in trees]
    spec = flats[0][1]
    consts, inputs, dims = [], [], []
    for j, first in enumerate(flats[0][0]):
        if isinstance(first, torch.Tensor):
            values = [f[0][j] for f in flats]
            shared = all(v is first for v in values)
            inputs.append(first if shared else torch.stack(values))
            dims.append(None if shared else 0)
            consts.append(_TENSOR)
        else:
            consts.append(first)
    return spec, consts, inputs, dims


class BatchedTrainer:
    """Trains the clients of one phase together (see the module docstring)."""

    def __init__(self, model: SplitModel, train_x: torch.Tensor, train_y: torch.Tensor, batch_size: int,
                 optimizer: OptimizerSpec | None = None, overhead: float | None = None, drop_last: bool = False,
                 precision: str = "fp32"):
        self.model = model
        self.x, self.y = train_x.contiguous(), train_y
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.precision = precision
        self.optimizer = optimizer or OptimizerSpec()
        # cost of one lockstep step in units of one client's batch: kernel launches dominate on a GPU
        self.overhead = overhead if overhead is not None else (16.0 if train_x.is_cuda else 1.0)

    @classmethod
    def like(cls, trainer, overhead: float | None = None) -> BatchedTrainer:
        """A batched trainer with ``trainer``'s model, data, batches, optimizer and precision."""
        return cls(trainer.model, trainer.x, trainer.y, trainer.batch_size, trainer.optimizer, overhead=overhead,
                   drop_last=trainer.drop_last, precision=trainer.precision)

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        """Models with buffers (BatchNorm running statistics) are trained by the sequential trainer."""
        return next(model.buffers(), None) is None

    def forward(self, params: Params, x: torch.Tensor) -> Out:
        return Out(*functional_call(self.model, network_params(params), (x,), {"with_features": True}))

    # ------------------------------------------------------------------ schedules
    def schedule(self, train_idx: torch.Tensor, epochs: int, max_steps: int | None, seed_keys) -> tuple:
        """(indices (S, B), weights (S, B)) of one client's phase: the sequential executor's batches,
        each epoch's last one (unless dropped) padded with zero-weight copies of the epoch's first sample."""
        B = self.batch_size
        idx_epochs, w_epochs = [], []
        for order in epoch_orders(train_idx, epochs, seed_keys):
            order = full_batches(order, B, self.drop_last)
            n = len(order)
            pad = (-n) % B
            idx_epochs.append(torch.cat([order, order[:1].expand(pad)]).view(-1, B))
            w_epochs.append(torch.cat([torch.ones(n, device=order.device),
                                       torch.zeros(pad, device=order.device)]).view(-1, B))
        idx, w = torch.cat(idx_epochs), torch.cat(w_epochs)
        if max_steps is not None:
            idx, w = idx[:max_steps], w[:max_steps]
        return idx, w

    # ------------------------------------------------------------------ one phase for many clients
    def train_group(self, starts: list[dict], ctxs: list[ClientContext], train_idxs: list[torch.Tensor],
                    seed_keys: list[tuple], phase: Phase, loss_fn, epochs: int, lr: float) -> list[tuple]:
        """Train every client's ``starts[i]`` for ``phase``; returns per client (params, loss sum,
        samples, steps) like ``Trainer.train``."""
        scheds = [self.schedule(ti, epochs, phase.max_steps, keys) for ti, keys in zip(train_idxs, seed_keys)]
        results: list = [None] * len(starts)
        groups: dict = {}
        for i, ctx in enumerate(ctxs):
            key = structure_key((ctx.received, ctx.state, ctx.counts))
            groups.setdefault(key, []).append(i)
        for members in groups.values():
            for bucket in buckets([len(scheds[i][0]) for i in members], self.overhead):
                ids = [members[b] for b in bucket]
                outs = self._train_bucket([starts[i] for i in ids], [ctxs[i] for i in ids],
                                          [scheds[i] for i in ids], phase, loss_fn, lr)
                for i, out in zip(ids, outs):
                    results[i] = out
        return results

    def _unused(self, start: dict, trainable: list, ctx: ClientContext, idx, w, loss_fn) -> frozenset:
        """Trained parameters the loss does not reach (gradient None under autograd), probed on one
        client's first batch. vmapped gradients are zeros there, and weight decay would move them."""
        params = {k: (v.detach().clone().requires_grad_(True) if k in trainable else v) for k, v in start.items()}
        train = {k: params[k] for k in trainable}
        x, y = self.x[idx], self.y[idx]
        loss = loss_fn(self.forward(params, x), Batch(x, y, w), train,
                       dataclasses.replace(ctx.loss_view(), forward=self.forward))
        grads = torch.autograd.grad(loss, list(train.values()), allow_unused=True)
        return frozenset(k for k, g in zip(train, grads) if g is None)

    def _train_bucket(self, starts, ctxs, scheds, phase: Phase, loss_fn, lr: float) -> list[tuple]:
        m, device = len(starts), self.x.device
        trainable = [k for k in starts[0] if part_of(k) in phase.trainable]
        frozen = [k for k in starts[0] if k not in trainable]
        train_p = {k: torch.stack([s[k] for s in starts]) for k in trainable}
        frozen_p, frozen_dims = {}, {}
        for k in frozen:
            first = starts[0][k]
            shared = all(s[k] is first for s in starts)
            frozen_p[k] = first if shared else torch.stack([s[k] for s in starts])
            frozen_dims[k] = None if shared else 0
        spec, consts, ctx_inputs, ctx_dims = _stack_leaves([(c.received, c.state, c.scratch, c.counts) for c in ctxs])
        template = dataclasses.replace(ctxs[0].loss_view(), forward=self.forward)

        # every client's schedule padded to the bucket's length with inactive steps
        lengths = [len(s[0]) for s in scheds]
        S, B = max(lengths), self.batch_size
        idx = torch.stack([torch.cat([s[0], s[0][:1].expand(S - len(s[0]), B)]) for s in scheds], 1)   # (S, m, B)
        w = torch.stack([torch.cat([s[1], s[1].new_zeros(S - len(s[1]), B)]) for s in scheds], 1)
        model = self.model

        def client_loss(tp, fp, x, y, wt, ctx_tensors):
            it = iter(ctx_tensors)
            received, state, scratch, counts = tree_unflatten([next(it) if c is _TENSOR else c for c in consts], spec)
            ctx = dataclasses.replace(template, received=received, state=state, scratch=scratch, counts=counts)
            out = Out(*functional_call(model, network_params({**fp, **tp}), (x,), {"with_features": True}))
            return loss_fn(out, Batch(x, y, wt), tp, ctx)

        step_fn = vmap(grad_and_value(client_loss), in_dims=(0, frozen_dims, 0, 0, 0, ctx_dims), randomness="different")
        opt = FunctionalOptimizer(self.optimizer.for_phase(phase), lr)
        unused = (
            self._unused(starts[0], trainable, ctxs[0], idx[0, 0], w[0, 0], loss_fn) if opt.spec.weight_decay else ()
        )
        opt_state = opt.init(train_p)
        total = torch.zeros(m, dtype=torch.float64, device=device)
        # which clients still step at each step: built once on the device (no host copy inside the loop)
        masks = torch.arange(S, device=device).unsqueeze(1) < torch.tensor(lengths, device=device).unsqueeze(0)
        shortest = min(lengths)
        model.train()
        around_phase, around_forward = step_scope(self.precision, device.type)
        with around_phase:
            for s in range(S):
                ids = idx[s]
                with around_forward():
                    grads, loss = step_fn(train_p, frozen_p, self.x[ids], self.y[ids], w[s], ctx_inputs)
                new_p, new_state = opt.update(train_p, grads, opt_state, unused)
                new_p = phase.project(new_p)
                contribution = loss.double() * w[s].sum(1).double()
                if s < shortest:
                    train_p, opt_state = new_p, new_state
                else:
                    mask = masks[s]
                    train_p = {k: _where(mask, new_p[k], train_p[k]) for k in train_p}
                    opt_state = {k: _where(mask, new_state[k], opt_state[k]) for k in opt_state}
                    contribution = torch.where(mask, contribution, torch.zeros_like(contribution))
                total += contribution
        totals = total.tolist()   # the phase's one synchronisation with the host
        out = []
        for i, start in enumerate(starts):   # a non-finite total is the caller's to report (train_cohorts)
            params = {k: (train_p[k][i].clone() if k in train_p else v) for k, v in start.items()}
            out.append((params, totals[i], int(scheds[i][1].sum()), lengths[i]))
        return out
