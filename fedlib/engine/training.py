"""Local training of one client: mini-batch schedules and the sequential trainer (the reference).

A client's sample order depends only on (experiment seed, round, client, phase), so every executor
draws the same mini-batches and a resumed run needs no saved RNG state.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.func import functional_call

from fedlib.engine.core import Batch, ClientContext, Out, Params, Phase, derived_seed
from fedlib.errors import TrainingDiverged
from fedlib.models import EXTRA, SplitModel, network_params, part_of


@dataclass(frozen=True)
class OptimizerSpec:
    kind: str = "sgd"            # "sgd" | "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0

    def for_phase(self, phase: Phase) -> OptimizerSpec:
        return OptimizerSpec(phase.optimizer or self.kind, self.momentum if phase.momentum is None else phase.momentum,
                             self.weight_decay if phase.weight_decay is None else phase.weight_decay)


def epoch_orders(train_idx: torch.Tensor, epochs: int, seed_keys: tuple[int, ...]) -> list[torch.Tensor]:
    """The client's sample order of each epoch (a permutation of its indices per epoch)."""
    gen = torch.Generator(device="cpu").manual_seed(derived_seed(*seed_keys))
    n = len(train_idx)
    return [train_idx[torch.randperm(n, generator=gen).to(train_idx.device)] for _ in range(epochs)]


# The arithmetic of a training step. fp32: everything in float32. bf16: forward and loss under autocast to bfloat16
# (matrix products and convolutions in bf16, reductions and the loss in float32), float32 master weights, gradients,
# optimizer state and server aggregation. tf32: CUDA matrix products and convolutions in TensorFloat-32.
# Evaluation always runs in float32.
PRECISIONS = ("fp32", "bf16", "tf32")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what ``platform`` says: two CPUs of another
    model may round float32 kernels differently."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown model"


def cpu_vector_unit() -> str:
    """The widest vector instructions this CPU has (Linux: /proc/cpuinfo flags): two processors of one model name
    ("AMD EPYC" in a virtual machine) may be different generations whose float32 kernels round differently."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return "unknown vector unit"
    return next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags),
                "SSE")


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX): elsewhere PyTorch emulates it, slower than
    float32."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def computes_natively(precision: str, device: str) -> bool:
    """Whether ``device`` ("cpu", "cuda[:n]") computes ``precision`` in hardware (fp32 always; tf32 on CUDA; bf16 on a
    CPU with bf16 instructions or a CUDA device that supports it)."""
    cuda = device.startswith("cuda")
    if precision == "tf32":
        return cuda
    if precision == "bf16":
        return (cuda and torch.cuda.is_available() and torch.cuda.is_bf16_supported()) or (not cuda and cpu_has_bf16())
    return True


@contextlib.contextmanager
def tf32_matmuls():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def step_scope(precision: str, device_type: str):
    """The contexts of one phase's training under ``precision``: (around the whole phase, around each forward
    and loss)."""
    if precision == "bf16":
        return contextlib.nullcontext(), lambda: torch.autocast(device_type, dtype=torch.bfloat16)
    if precision == "tf32":
        return tf32_matmuls(), contextlib.nullcontext
    return contextlib.nullcontext(), contextlib.nullcontext


def full_batches(order: torch.Tensor, batch_size: int, drop_last: bool) -> torch.Tensor:
    """An epoch's order, without its last mini-batch where ``drop_last`` and that batch is partial (torch's
    ``DataLoader(drop_last=True)``); a client with fewer samples than one batch keeps its one batch."""
    n = len(order)
    return order[:n - n % batch_size] if drop_last and n >= batch_size else order


def diverged(value: float, ctx: ClientContext, lr: float) -> TrainingDiverged:
    return TrainingDiverged(f"loss became {value} in round {ctx.round + 1}, client {ctx.client_id}: lower the "
                            f"learning rate (lr={lr}) or a hyperparameter that weights the method's loss")


@functools.lru_cache(maxsize=1)
def tune_allocator() -> bool:
    """Keep large blocks in glibc's heap instead of fresh mmap pages: every training step allocates
    and frees activation-sized buffers, and first-touch page faults on them cost ~30% of a CPU step
    (benchmarks/round_speed.py). Memory freed stays with the process. FEDLIB_MALLOC_TUNING=0 opts out."""
    if os.environ.get("FEDLIB_MALLOC_TUNING", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 31))


def make_optimizer(spec: OptimizerSpec, tensors, lr: float) -> torch.optim.Optimizer:
    if spec.kind == "adam":
        # foreach: the same arithmetic in the same order as the per-tensor loop (equal to the bit), a few kernels
        # over all tensors instead of ~10 per tensor: 4-5x faster on a CPU for FedPCL's 1M-weight projection
        # (torch's default on a GPU already)
        return torch.optim.Adam(tensors, lr=lr, weight_decay=spec.weight_decay, foreach=True)
    return torch.optim.SGD(tensors, lr=lr, momentum=spec.momentum, weight_decay=spec.weight_decay)


class Trainer:
    """Trains one client at a time in one reusable module (the reference executor's engine).

    Data stay on the device as tensors; a mini-batch is an index slice. The loss of each step is
    accumulated on the device and checked once per phase (no host synchronisation per step)."""

    def __init__(self, model: SplitModel, train_x: torch.Tensor, train_y: torch.Tensor, batch_size: int,
                 optimizer: OptimizerSpec = OptimizerSpec(), drop_last: bool = False, precision: str = "fp32"):
        if not train_x.is_cuda:
            tune_allocator()
        # channels_last: ~1.7x faster small convolutions on CPU (see benchmarks/round_speed.py)
        self.layout = torch.channels_last if train_x.ndim == 4 else torch.contiguous_format
        self.model = model.to(memory_format=self.layout)
        self.x, self.y = train_x.contiguous(memory_format=self.layout), train_y
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.precision = precision
        self.optimizer = optimizer
        self.buffer_names = frozenset(name for name, _ in self.model.named_buffers())

    # ------------------------------------------------------------------ forward passes
    def forward(self, params: Params, x: torch.Tensor) -> Out:
        """Forward with any parameter dict (teachers, frozen copies); buffers are copied, never written."""
        params = network_params(params)
        if self.buffer_names:
            params = {k: (v.clone() if k in self.buffer_names else v) for k, v in params.items()}
        return Out(*functional_call(self.model, params, (x,), {"with_features": True}))

    @torch.no_grad()
    def features(self, params: Params, x: torch.Tensor, chunk: int | None = None) -> Out:
        """Features and logits of ``x`` under ``params`` (evaluation mode), ``chunk`` rows per forward pass:
        by default 256 on the CPU, where larger chunks spill out of the caches (cnn2: 2048 rows cost 2.7x the
        time per image of 256, with bitwise the same outputs), 2048 on a GPU."""
        chunk = chunk or (2048 if x.is_cuda else 256)
        x = x.contiguous(memory_format=self.layout)
        with self._evaluating(params):
            h = torch.cat([self.model.body(x[start:start + chunk]) for start in range(0, len(x), chunk)])
            return self._from_body(h, chunk)

    @torch.no_grad()
    def features_from(self, params: Params, h: torch.Tensor, chunk: int | None = None) -> Out:
        """``features`` from encoder outputs ``h`` that ``features`` gave for a model with the same body: projector
        and head in the same chunks (the same kernels on the same rows), so bitwise what ``features`` gives."""
        with self._evaluating(params):
            return self._from_body(h, chunk or (2048 if h.is_cuda else 256))

    @contextlib.contextmanager
    def _evaluating(self, params: Params) -> Iterator[None]:
        self.model.load_state_dict(network_params(params), strict=True)
        self.model.eval()
        try:
            yield
        finally:
            self.model.train()

    def _from_body(self, h: torch.Tensor, chunk: int) -> Out:
        """Projector and head of the loaded model on ``h``, ``chunk`` rows at a time."""
        zs, ls = [], []
        for start in range(0, len(h), chunk):
            z, logits, _ = self.model.forward_features(h[start:start + chunk], from_features=True)
            zs.append(z)
            ls.append(logits)
        return Out(torch.cat(zs), torch.cat(ls), h)

    def forward_from(self, params: Params, h: torch.Tensor) -> Out:
        """Projector and head applied to encoder outputs ``h`` (server-side calibration, pFedCSPC)."""
        params = {k: v for k, v in network_params(params).items() if k.split(".", 1)[0] in ("projector", "head")}
        return Out(*functional_call(self.model, params, (h,), {"with_features": True, "from_features": True}))

    def client_features(self, train_idx: torch.Tensor):
        return lambda params: self.features(params, self.x[train_idx])

    # ------------------------------------------------------------------ one phase
    def train(self, params: Params, phase: Phase, loss_fn, ctx: ClientContext, train_idx: torch.Tensor,
              epochs: int, lr: float, seed_keys: tuple[int, ...]) -> tuple[dict[str, torch.Tensor], float, int, int]:
        """Train ``params`` (returned as new tensors) for one phase on the client's samples.

        Returns (parameters, sum of per-batch loss x batch size, samples seen, optimizer steps).
        Raises TrainingDiverged on a non-finite loss."""
        model = self.model
        model.load_state_dict(network_params(params), strict=True)
        trainable: dict[str, torch.Tensor] = {}
        for name, p in model.named_parameters():
            p.requires_grad_(part_of(name) in phase.trainable)
            if p.requires_grad:
                trainable[name] = p
        extras = {k: v.detach().clone().requires_grad_(EXTRA in phase.trainable) for k, v in params.items()
                  if part_of(k) == EXTRA}
        if EXTRA in phase.trainable:
            trainable.update(extras)
        opt = make_optimizer(self.optimizer.for_phase(phase), list(trainable.values()), lr)
        total = torch.zeros((), dtype=torch.float64, device=self.x.device)
        count = steps = 0
        model.train()
        loss_ctx = ctx.loss_view()
        around_phase, around_forward = step_scope(self.precision, self.x.device.type)
        with around_phase:
            for order in epoch_orders(train_idx, epochs, seed_keys):
                order = full_batches(order, self.batch_size, self.drop_last)
                for start in range(0, len(order), self.batch_size):
                    if phase.max_steps is not None and steps >= phase.max_steps:
                        break
                    idx = order[start:start + self.batch_size]
                    batch = Batch(self.x[idx], self.y[idx])
                    opt.zero_grad(set_to_none=True)
                    if phase.step is None:
                        with around_forward():
                            loss = loss_fn(Out(*model.forward_features(batch.x)), batch, trainable, loss_ctx)
                        loss.backward()
                    else:
                        with around_forward():
                            loss = phase.step(batch, trainable, ctx)
                    opt.step()
                    with torch.no_grad():   # projected steps (Phase.bounds)
                        for key, low, high in phase.bounds:
                            trainable[key].clamp_(low, high)
                    steps += 1
                    total += loss.detach().double() * len(idx)
                    count += len(idx)
        for p in model.parameters():
            p.requires_grad_(True)
        value = float(total)
        if not math.isfinite(value):
            raise diverged(value, ctx, lr)
        return ({**{k: v.detach().clone() for k, v in model.state_dict().items()},
                 **{k: v.detach().clone() for k, v in extras.items()}}, value, count, steps)
