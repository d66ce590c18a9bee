"""Text to seconds."""

import re

from .units import MILLISECONDS, canonical_unit

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(r"\s*(" + _NUMBER + r")\s*([A-Za-z]+)")
_CLOCK = re.compile(r"^(\d+):([0-5]\d)(?::([0-5]\d(?:\.\d+)?))?$")


class DurationError(ValueError):
    """Text that is not a duration."""


def _clock_seconds(m):
    first, second, third = m.groups()
    if third is None:  # M:SS
        return int(first) * 60 + int(second)
    return int(first) * 3600 + int(second) * 60 + float(third)


def parse_duration(text):
    """The number of seconds ``text`` stands for.

    Accepts numbers with units ("90s", "1.5h", "2d 4h", "1 hour 30 minutes",
    "250ms"), each unit at most once, or a clock ("1:30:00", "4:05").  A
    leading sign applies to the whole duration: "-1h30m" is -5400.
    Numbers are returned as they are.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise DurationError("a duration is text or a number, got %r" % (text,))
    if not isinstance(text, str):
        return float(text)
    s = text.strip()
    sign = 1
    if s[:1] in ("-", "+"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:].lstrip()
    if not s:
        raise DurationError("empty duration: %r" % (text,))
    clock = _CLOCK.match(s)
    if clock:
        return sign * float(_clock_seconds(clock))
    total_ms = 0.0
    seen = set()
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise DurationError("cannot read %r from %r" % (text, s[pos:].strip()))
        number, name = m.groups()
        unit = canonical_unit(name)
        if unit is None:
            raise DurationError("unknown unit %r in %r" % (name, text))
        if unit in seen:
            raise DurationError("unit %r given twice in %r" % (unit, text))
        seen.add(unit)
        total_ms += float(number) * MILLISECONDS[unit]
        pos = m.end()
    return sign * total_ms / 1000
