import unittest

from intervals import IntervalSet


class AddTests(unittest.TestCase):
    def test_empty(self):
        s = IntervalSet()
        self.assertEqual(list(s), [])
        self.assertFalse(s)
        self.assertIsNone(s.span())

    def test_disjoint_stay_sorted(self):
        s = IntervalSet([(10, 12), (0, 2), (5, 7)])
        self.assertEqual(list(s), [(0, 2), (5, 7), (10, 12)])

    def test_overlapping_merge(self):
        s = IntervalSet([(0, 5), (3, 8)])
        self.assertEqual(list(s), [(0, 8)])

    def test_covering_interval_swallows_others(self):
        s = IntervalSet([(1, 2), (4, 5), (7, 8)])
        s.add(0, 10)
        self.assertEqual(list(s), [(0, 10)])

    def test_inside_existing_changes_nothing(self):
        s = IntervalSet([(0, 10)])
        s.add(2, 3)
        self.assertEqual(list(s), [(0, 10)])

    def test_touching_intervals_merge(self):
        s = IntervalSet([(1, 3)])
        s.add(3, 5)
        self.assertEqual(list(s), [(1, 5)])
        s.add(0, 1)
        self.assertEqual(list(s), [(0, 5)])
        self.assertEqual(len(IntervalSet([(0, 1), (2, 3)]) | IntervalSet([(1, 2)])), 1)

    def test_empty_interval_refused(self):
        with self.assertRaises(ValueError):
            IntervalSet().add(3, 3)


class RemoveTests(unittest.TestCase):
    def test_split(self):
        s = IntervalSet([(0, 10)])
        s.remove(4, 6)
        self.assertEqual(list(s), [(0, 4), (6, 10)])

    def test_exact(self):
        s = IntervalSet([(0, 10), (20, 30)])
        s.remove(0, 10)
        self.assertEqual(list(s), [(20, 30)])

    def test_trim_end(self):
        s = IntervalSet([(0, 10)])
        s.remove(8, 15)
        self.assertEqual(list(s), [(0, 8)])

    def test_in_a_gap_changes_nothing(self):
        s = IntervalSet([(0, 10), (12, 20)])
        s.remove(10, 12)
        self.assertEqual(list(s), [(0, 10), (12, 20)])

    def test_from_empty(self):
        s = IntervalSet()
        s.remove(0, 1)
        self.assertEqual(len(s), 0)

    def test_across_several_intervals(self):
        s = IntervalSet([(0, 10), (12, 20), (25, 30)])
        s.remove(5, 27)
        self.assertEqual(list(s), [(0, 5), (27, 30)])
        s.remove(-1, 31)
        self.assertEqual(list(s), [])


class QueryTests(unittest.TestCase):
    def setUp(self):
        self.s = IntervalSet([(0, 2), (5, 7.5), (9, 10)])

    def test_contains(self):
        self.assertIn(0, self.s)
        self.assertIn(7.4, self.s)
        self.assertNotIn(2, self.s)
        self.assertNotIn(-1, self.s)
        self.assertNotIn(10, self.s)

    def test_total_and_span(self):
        self.assertEqual(self.s.total(), 5.5)
        self.assertEqual(self.s.span(), (0, 10))

    def test_gaps(self):
        self.assertEqual(list(self.s.gaps()), [(2, 5), (7.5, 9)])

    def test_equality_and_repr(self):
        self.assertEqual(IntervalSet([(0, 2)]), IntervalSet([(1, 2), (0, 1.5)]))
        self.assertEqual(repr(IntervalSet([(0, 2)])), "IntervalSet([(0, 2)])")


class SetAlgebraTests(unittest.TestCase):
    def test_union(self):
        u = IntervalSet([(0, 2), (10, 12)]) | IntervalSet([(1, 4), (6, 8)])
        self.assertEqual(list(u), [(0, 4), (6, 8), (10, 12)])

    def test_intersection(self):
        i = IntervalSet([(0, 5), (10, 15)]) & IntervalSet([(3, 12)])
        self.assertEqual(list(i), [(3, 5), (10, 12)])

    def test_intersection_of_touching_is_empty(self):
        self.assertEqual(len(IntervalSet([(0, 5)]) & IntervalSet([(5, 9)])), 0)

    def test_operands_unchanged(self):
        a = IntervalSet([(0, 2)])
        b = IntervalSet([(1, 3)])
        a | b
        a & b
        self.assertEqual(list(a), [(0, 2)])


if __name__ == "__main__":
    unittest.main()
