"""The units, in whole milliseconds so that sums and carries stay exact."""

# largest first: format_duration walks them in this order
UNITS = (
    ("w", 7 * 24 * 3600 * 1000),
    ("d", 24 * 3600 * 1000),
    ("h", 3600 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
)
MILLISECONDS = dict(UNITS)

ALIASES = {
    "msec": "ms",
    "millisecond": "ms",
    "milliseconds": "ms",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "min": "m",
    "mins": "m",
    "minute": "m",
    "minutes": "m",
    "hr": "h",
    "hrs": "h",
    "hour": "h",
    "hours": "h",
    "day": "d",
    "days": "d",
    "week": "w",
    "weeks": "w",
}


def canonical_unit(name):
    """The unit symbol for ``name`` (a symbol or a word, any case), or None."""
    name = name.lower()
    name = ALIASES.get(name, name)
    return name if name in MILLISECONDS else None
