"""Sets of numbers kept as sorted, disjoint, half-open intervals [start, end)."""

from .intervalset import IntervalSet

__all__ = ["IntervalSet"]
__version__ = "2.1.0"
