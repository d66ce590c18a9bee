"""Durations as people write them: "1h30m" is 5400 seconds and 5400 seconds is "1h30m"."""

from .format import format_duration
from .parse import DurationError, parse_duration
from .units import UNITS

__all__ = ["DurationError", "UNITS", "format_duration", "parse_duration"]
__version__ = "0.4.0"
