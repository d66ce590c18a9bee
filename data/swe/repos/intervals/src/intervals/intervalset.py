"""IntervalSet: a set of numbers kept as sorted, disjoint, half-open intervals."""

from bisect import bisect_left, bisect_right


def _check(start, end):
    if not start < end:
        raise ValueError("an interval needs start < end, got [%r, %r)" % (start, end))


class IntervalSet:
    """Numbers x with start <= x < end for one of its intervals.

    Intervals that overlap or touch are merged as they are added, so the set
    is always its shortest list of disjoint intervals, in order.
    """

    def __init__(self, intervals=()):
        self._starts = []
        self._ends = []
        for start, end in intervals:
            self.add(start, end)

    def add(self, start, end):
        """Adds [start, end), merging every interval it overlaps or touches."""
        _check(start, end)
        # the intervals from i to j - 1 overlap or touch [start, end)
        i = bisect_left(self._ends, start)
        j = bisect_right(self._starts, end)
        if i < j:
            start = min(start, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def remove(self, start, end):
        """Removes [start, end); intervals it cuts keep their parts outside it."""
        _check(start, end)
        # the intervals from i to j - 1 overlap [start, end)
        i = bisect_right(self._ends, start)
        j = bisect_left(self._starts, end)
        if i >= j:
            return
        pieces = [p for p in ((self._starts[i], start), (end, self._ends[j - 1])) if p[0] < p[1]]
        self._starts[i:j] = [s for s, _ in pieces]
        self._ends[i:j] = [e for _, e in pieces]

    def __contains__(self, x):
        i = bisect_right(self._starts, x) - 1
        return i >= 0 and x < self._ends[i]

    def __iter__(self):
        return iter(list(zip(self._starts, self._ends)))

    def __len__(self):
        return len(self._starts)

    def __bool__(self):
        return bool(self._starts)

    def __eq__(self, other):
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return list(self) == list(other)

    def __repr__(self):
        return "IntervalSet(%r)" % (list(self),)

    def total(self):
        """The summed length of the intervals."""
        return sum(e - s for s, e in self)

    def span(self):
        """(first start, last end), or None when empty."""
        return (self._starts[0], self._ends[-1]) if self else None

    def union(self, other):
        out = IntervalSet(self)
        for s, e in other:
            out.add(s, e)
        return out

    def intersection(self, other):
        out = IntervalSet()
        a, b = list(self), list(other)
        i = j = 0
        while i < len(a) and j < len(b):
            start = max(a[i][0], b[j][0])
            end = min(a[i][1], b[j][1])
            if start < end:
                out.add(start, end)
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return out

    def gaps(self):
        """The intervals between consecutive intervals, as a new IntervalSet."""
        return IntervalSet(zip(self._ends[:-1], self._starts[1:]))

    __or__ = union
    __and__ = intersection
