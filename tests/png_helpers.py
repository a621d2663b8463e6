"""Looking at the PNGs the plot tests produce: decode them and check which run colours they show."""

from __future__ import annotations

import io
from typing import Any


def decode_png(data: bytes) -> Any:
    """The pixels (height x width x RGBA floats) of a PNG; fails if the bytes are not a PNG."""
    from matplotlib.image import imread

    return imread(io.BytesIO(data), format="png")


def has_colour(pixels: Any, hex_colour: str, tolerance: float = 0.03) -> bool:
    """Whether any pixel is within ``tolerance`` of ``#rrggbb`` in every channel."""
    import numpy as np

    rgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return bool((np.abs(pixels[:, :, :3] - rgb).max(axis=2) < tolerance).any())
