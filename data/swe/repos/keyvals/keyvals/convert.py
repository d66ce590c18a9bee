"""Typed reads of values, which are always text in the file."""

TRUE_WORDS = frozenset(["1", "true", "yes", "on"])
FALSE_WORDS = frozenset(["0", "false", "no", "off"])


def as_bool(value):
    """True for 1/true/yes/on, False for 0/false/no/off (any case); anything else is an error."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("not a boolean: %r" % (value,))


def as_int(value):
    """An integer, in decimal or with a 0x / 0o / 0b prefix; underscores between digits are allowed."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    digits = text.lstrip("+-")
    base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2], 10)
    try:
        return int(text, base)
    except ValueError:
        raise ValueError("not an integer: %r" % (value,)) from None


def as_list(value, separator=","):
    """The non-empty, stripped items of ``value`` split at ``separator``."""
    if isinstance(value, (list, tuple)):
        return list(value)
    return [item.strip() for item in str(value).split(separator) if item.strip()]
