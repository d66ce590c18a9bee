"""Seconds to text."""

from .units import MILLISECONDS, UNITS


def format_duration(seconds, precision="s"):
    """The shortest text for ``seconds``, largest units first: 5400 gives "1h30m".

    ``precision`` is the smallest unit shown; the value is rounded to it
    (half to even), so 3599.6 seconds is "1h".  Zero is "0" in that unit.
    """
    if precision not in MILLISECONDS:
        raise ValueError("precision must be one of %s, got %r" % (", ".join(MILLISECONDS), precision))
    step = MILLISECONDS[precision]
    sign = "-" if seconds < 0 else ""
    # round once, to whole steps, so that a carry reaches the larger units
    steps = round(abs(seconds) * 1000 / step)
    if steps == 0:
        return "0" + precision
    parts = []
    for unit, size in UNITS:
        if size < step:
            break
        count, steps = divmod(steps, size // step)
        if count:
            parts.append("%d%s" % (count, unit))
    return sign + "".join(parts)
