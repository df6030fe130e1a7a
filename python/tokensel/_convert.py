"""Conversions the extension calls back into: NumPy scalars as JSON values."""

from __future__ import annotations

from typing import Any


def json_default(o: Any) -> Any:
    """``json.dumps``'s ``default``: a NumPy scalar or 0-d array of a real or boolean
    type (``np.int64(3)``, ``np.float32(0.5)``, ``np.bool_(True)``) as its Python value;
    anything else (complex numbers included) is refused with TypeError."""
    import numpy as np

    if isinstance(o, (np.generic, np.ndarray)) and np.ndim(o) == 0 and o.dtype.kind in "biuf":
        return o.item()
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
