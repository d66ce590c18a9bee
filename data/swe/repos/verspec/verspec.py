"""Version strings: parse them, compare them, bump them, match them against specifiers.

A version is a release of dot-separated non-negative integers, optionally
prefixed with ``v`` and followed by a pre-release tag: ``1.4``, ``v2.0.1``,
``3.1rc2``, ``1.0a1``, ``0.9b3``.  Trailing zeros do not count, so ``1.0``
and ``1.0.0`` are the same version.  A pre-release sorts before its final
release: ``1.0a1 < 1.0b1 < 1.0rc1 < 1.0``.

Specifiers are comma-separated clauses that must all hold:
``>=1.2, <2``, ``!=1.3.1``, ``==1.4.*``, ``~=1.4.2``.
"""

import re
from functools import total_ordering

__all__ = ["InvalidVersion", "InvalidSpecifier", "Version", "parse", "matches", "bump"]
__version__ = "1.3.0"

_VERSION = re.compile(r"^v?(?P<release>\d+(?:\.\d+)*)(?:(?P<tag>a|b|rc)(?P<number>\d+))?$")
_CLAUSE = re.compile(r"^(?P<op>~=|==|!=|>=|<=|>|<)\s*(?P<version>[^\s]+)$")
_TAG_RANK = {"a": 0, "b": 1, "rc": 2}
_PARTS = ("major", "minor", "patch")


class InvalidVersion(ValueError):
    """A string that is not a version."""


class InvalidSpecifier(ValueError):
    """A string that is not a specifier."""


@total_ordering
class Version:
    """An immutable, comparable, hashable version."""

    __slots__ = ("release", "pre")

    def __init__(self, release, pre=None):
        release = tuple(release)
        if not release or any(not isinstance(p, int) or p < 0 for p in release):
            raise InvalidVersion("a release is one or more non-negative integers, got %r" % (release,))
        if pre is not None and (len(pre) != 2 or pre[0] not in _TAG_RANK):
            raise InvalidVersion("a pre-release is (tag, number) with tag a, b or rc, got %r" % (pre,))
        object.__setattr__(self, "release", release)
        object.__setattr__(self, "pre", None if pre is None else (pre[0], int(pre[1])))

    def __setattr__(self, name, value):
        raise AttributeError("Version is immutable")

    @classmethod
    def parse(cls, text):
        m = _VERSION.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise InvalidVersion("not a version: %r" % (text,))
        release = tuple(int(p) for p in m.group("release").split("."))
        pre = (m.group("tag"), int(m.group("number"))) if m.group("tag") else None
        return cls(release, pre)

    @property
    def is_prerelease(self):
        return self.pre is not None

    def _key(self):
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        # a final release sorts after every pre-release of it
        pre = (len(_TAG_RANK), 0) if self.pre is None else (_TAG_RANK[self.pre[0]], self.pre[1])
        return tuple(release), pre

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        text = ".".join(str(p) for p in self.release)
        if self.pre is not None:
            text += "%s%d" % self.pre
        return text

    def __repr__(self):
        return "Version(%r)" % str(self)


def parse(text):
    """The Version of ``text``; raises InvalidVersion."""
    return Version.parse(text)


def _as_version(value):
    return value if isinstance(value, Version) else Version.parse(value)


def bump(version, part="patch"):
    """The next final release after ``version`` at ``part`` (major, minor or patch).

    >>> str(bump("1.4.2", "minor"))
    '1.5.0'
    >>> str(bump("2.0rc1", "patch"))
    '2.0.0'
    """
    v = _as_version(version)
    if part not in _PARTS:
        raise ValueError("part must be one of %s, got %r" % (", ".join(_PARTS), part))
    index = _PARTS.index(part)
    release = list(v.release) + [0] * (3 - len(v.release))
    if v.is_prerelease and all(p == 0 for p in release[index + 1 :]):
        # the final release of a pre-release is the next version at any part
        return Version(release)
    release[index] += 1
    release[index + 1 :] = [0] * (len(release) - index - 1)
    return Version(release)


def _prefix_matches(version, prefix):
    release = list(version.release) + [0] * max(0, len(prefix) - len(version.release))
    return tuple(release[: len(prefix)]) == tuple(prefix)


def _clause(op, text):
    """A predicate on versions for one clause."""
    if text.endswith(".*"):
        if op not in ("==", "!="):
            raise InvalidSpecifier("a wildcard only follows == or !=, got %s%s" % (op, text))
        prefix = Version.parse(text[:-2]).release
        if op == "==":
            return lambda v: _prefix_matches(v, prefix)
        return lambda v: not _prefix_matches(v, prefix)
    bound = Version.parse(text)
    if op == "~=":
        if len(bound.release) < 2:
            raise InvalidSpecifier("~= needs at least two release parts, got %s" % text)
        prefix = bound.release[:-1]
        return lambda v: v >= bound and _prefix_matches(v, prefix)
    compare = {
        "==": lambda v: v == bound,
        "!=": lambda v: v != bound,
        ">=": lambda v: v >= bound,
        "<=": lambda v: v <= bound,
        ">": lambda v: v > bound,
        "<": lambda v: v < bound,
    }
    return compare[op]


def matches(version, specifier):
    """Whether ``version`` satisfies every clause of ``specifier``.

    >>> matches("1.4.5", ">=1.4, <2")
    True
    """
    v = _as_version(version)
    clauses = [c.strip() for c in specifier.split(",")]
    if not specifier.strip() or not all(clauses):
        raise InvalidSpecifier("empty clause in %r" % (specifier,))
    predicates = []
    for c in clauses:
        m = _CLAUSE.match(c)
        if m is None:
            raise InvalidSpecifier("not a clause: %r" % (c,))
        predicates.append(_clause(m.group("op"), m.group("version")))
    return all(p(v) for p in predicates)
