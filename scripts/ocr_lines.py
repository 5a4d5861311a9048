#!/usr/bin/env python3
"""Render text lines as PP-OCR recogniser inputs: the real inputs `roofline compress` calibrates
and measures accuracy on for the PP-OCR recogniser (scripts/ocr_eval.py decodes them).

Usage (project venv):
    .venv/bin/python scripts/ocr_lines.py OUT_DIR [--count 24] [--seed 0] [--width 320]

Each line is a random mix of words, numbers and dates drawn in black on white with a system
TrueType font (DejaVu Sans where installed, else Pillow's built-in font), then prepared as the
PP-OCR recogniser expects: resized to height 48 keeping the aspect ratio (width at most
--width), scaled to [-1, 1] ((x / 255 - 0.5) / 0.5), laid out as 1x3x48xW and padded on the
right with zeros. Writes OUT_DIR/line_NNN.npy (float32) and OUT_DIR/lines.txt (the texts).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

WORDS = [
    "invoice", "total", "amount", "receipt", "station", "order", "number", "date", "paid",
    "roofline", "model", "latency", "batch", "street", "road", "city", "phone", "email",
    "Monday", "Friday", "March", "October", "Price", "Qty", "TAX", "VAT", "No.", "ID",
]
FONTS = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
]


def text_line(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(2, 4)):
        kind = rng.random()
        if kind < 0.55:
            parts.append(rng.choice(WORDS))
        elif kind < 0.8:
            parts.append(str(rng.randint(0, 99999)))
        else:
            parts.append(f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}")
    return " ".join(parts)


def font(rng: random.Random, size: int):
    installed = [f for f in FONTS if Path(f).exists()]
    if installed:
        return ImageFont.truetype(rng.choice(installed), size)
    return ImageFont.load_default(size)


def render(text: str, rng: random.Random) -> Image.Image:
    face = font(rng, rng.randint(26, 34))
    left, top, right, bottom = face.getbbox(text)
    pad = 6
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), "white")
    ImageDraw.Draw(image).text((pad - left, pad - top), text, fill="black", font=face)
    return image


def prepare(image: Image.Image, width: int) -> np.ndarray:
    height = 48
    resized_w = min(width, max(1, round(image.width * height / image.height)))
    resized = image.resize((resized_w, height), Image.BILINEAR)
    x = np.asarray(resized, dtype=np.float32) / 255.0
    x = (x - 0.5) / 0.5
    out = np.zeros((1, 3, height, width), dtype=np.float32)
    out[0, :, :, :resized_w] = x.transpose(2, 0, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=320)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    texts = []
    for i in range(args.count):
        text = text_line(rng)
        np.save(args.out / f"line_{i:03d}.npy", prepare(render(text, rng), args.width))
        texts.append(text)
    (args.out / "lines.txt").write_text("\n".join(texts) + "\n")
    print(f"wrote {args.count} line(s) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
