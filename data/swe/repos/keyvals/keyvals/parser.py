"""Text to {section: {key: value}}."""

import re

_SECTION = re.compile(r"^\[\s*([^\]]+?)\s*\]$")
_PAIR = re.compile(r"^([^=:\s][^=:]*?)\s*[=:]\s*(.*)$")
_QUOTES = "\"'"


class ParseError(ValueError):
    """A line that is neither a comment, a section header nor a key = value pair."""

    def __init__(self, message, line):
        super().__init__("line %d: %s" % (line, message))
        self.line = line


def _strip_comment(value):
    """``value`` without a trailing comment: a # or ; after whitespace, outside quotes."""
    quote = None
    for i, c in enumerate(value):
        if quote:
            if c == quote:
                quote = None
        elif c in _QUOTES:
            quote = c
        elif c in "#;" and i > 0 and value[i - 1].isspace():
            return value[:i].rstrip()
    return value


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] and value[0] in _QUOTES:
        return value[1:-1]
    return value


def loads(text, default_section="default"):
    """The sections of ``text``, each a dict of its keys (lower case) to their values (text).

    Blank lines and lines starting with # or ; are skipped, and so is a # or ;
    that follows whitespace in a value, with the rest of its line, unless it is
    inside quotes.  Pairs before the first header belong to ``default_section``;
    a key given twice keeps its last value; one pair of matching quotes around
    a value is removed.
    """
    data = {}
    section = default_section
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            data.setdefault(section, {})
            continue
        pair = _PAIR.match(line)
        if pair is None:
            raise ParseError("expected `key = value` or `[section]`, got %r" % (line,), number)
        key = pair.group(1).strip().lower()
        data.setdefault(section, {})[key] = _unquote(_strip_comment(pair.group(2)))
    return data


def load(path, default_section="default"):
    """loads() of the file at ``path`` (UTF-8)."""
    with open(path, encoding="utf-8") as f:
        return loads(f.read(), default_section)
