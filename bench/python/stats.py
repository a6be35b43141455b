"""Percentiles and result rows of the Python benchmark."""

from __future__ import annotations

from typing import Any, Dict, List


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def row(name: str, us: List[float]) -> Dict[str, Any]:
    return {"case": name, "p50_us": round(pct(us, 50), 2), "p99_us": round(pct(us, 99), 2),
            "n": len(us)}  # fmt: skip
