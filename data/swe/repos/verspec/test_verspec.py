import unittest

import verspec
from verspec import InvalidSpecifier, InvalidVersion, Version, bump, matches, parse


class ParseTests(unittest.TestCase):
    def test_release(self):
        self.assertEqual(parse("1.4.2").release, (1, 4, 2))

    def test_leading_v_and_spaces(self):
        self.assertEqual(parse("  v2.0 ").release, (2, 0))

    def test_prerelease(self):
        v = parse("3.1rc2")
        self.assertEqual(v.pre, ("rc", 2))
        self.assertTrue(v.is_prerelease)

    def test_final_is_not_prerelease(self):
        self.assertFalse(parse("3.1").is_prerelease)

    def test_str_round_trip(self):
        for text in ["1", "1.0", "0.9b3", "10.20.30a1"]:
            self.assertEqual(str(parse(text)), text)

    def test_repr(self):
        self.assertEqual(repr(parse("1.2")), "Version('1.2')")

    def test_invalid(self):
        for text in ["", "1.", ".1", "1.x", "1.0c1", "1.0rc", None]:
            with self.assertRaises(InvalidVersion):
                parse(text)

    def test_negative_release_part(self):
        with self.assertRaises(InvalidVersion):
            Version((1, -1))

    def test_immutable(self):
        v = parse("1.0")
        with self.assertRaises(AttributeError):
            v.release = (2,)


class CompareTests(unittest.TestCase):
    def test_numeric_not_lexical(self):
        self.assertLess(parse("1.9"), parse("1.10"))

    def test_trailing_zeros_are_equal(self):
        self.assertEqual(parse("1.0"), parse("1.0.0"))

    def test_prerelease_order(self):
        order = ["1.0a1", "1.0a2", "1.0b1", "1.0rc1", "1.0", "1.0.1"]
        self.assertEqual(sorted(order[::-1], key=parse), order)

    def test_not_equal_to_strings(self):
        self.assertNotEqual(parse("1.0"), "1.0")

    def test_max(self):
        self.assertEqual(str(max(map(parse, ["0.9", "1.0rc1", "0.10"]))), "1.0rc1")

    def test_hash_agrees_with_equality(self):
        self.assertEqual(hash(parse("2.1")), hash(parse("2.1.0.0")))
        self.assertEqual(len({parse("1.0"), parse("1.0.0"), parse("1")}), 1)
        self.assertIn(parse("3.0.0"), {parse("3"): "three"})


class BumpTests(unittest.TestCase):
    def test_patch(self):
        self.assertEqual(str(bump("1.4.2")), "1.4.3")

    def test_minor_resets_patch(self):
        self.assertEqual(str(bump("1.4.2", "minor")), "1.5.0")

    def test_major_of_short_release(self):
        self.assertEqual(str(bump("1", "major")), "2.0.0")

    def test_prerelease_becomes_final(self):
        self.assertEqual(str(bump("2.0rc1", "minor")), "2.0.0")

    def test_prerelease_with_patch_part(self):
        self.assertEqual(str(bump("2.0.1rc1", "minor")), "2.1.0")

    def test_bad_part(self):
        with self.assertRaises(ValueError):
            bump("1.0", "micro")


class MatchTests(unittest.TestCase):
    def test_range(self):
        self.assertTrue(matches("1.4.5", ">=1.4, <2"))
        self.assertFalse(matches("2.0", ">=1.4, <2"))

    def test_exclusion(self):
        self.assertFalse(matches("1.3.1", ">=1.0,!=1.3.1"))

    def test_strict_bounds(self):
        self.assertFalse(matches("1.0", ">1.0"))
        self.assertTrue(matches("1.0", "<=1.0.0"))

    def test_wildcard(self):
        self.assertTrue(matches("1.4.9", "==1.4.*"))
        self.assertFalse(matches("1.5", "==1.4.*"))
        self.assertTrue(matches("1.5", "!=1.4.*"))

    def test_compatible_three_parts(self):
        self.assertTrue(matches("1.4.2", "~=1.4.2"))
        self.assertTrue(matches("1.4.9", "~=1.4.2"))
        self.assertFalse(matches("1.4.1", "~=1.4.2"))
        self.assertFalse(matches("1.5.0", "~=1.4.2"))

    def test_compatible_two_parts(self):
        self.assertTrue(matches("1.4", "~=1.4"))
        self.assertTrue(matches("1.9.3", "~=1.4"))
        self.assertFalse(matches("2.0", "~=1.4"))
        self.assertFalse(matches("1.3.9", "~=1.4"))

    def test_version_objects(self):
        self.assertTrue(matches(Version((1, 2)), "==1.2.0"))

    def test_invalid_specifiers(self):
        for spec in ["", "1.0", ">=1.0,", "=>1.0", ">=1.*", "~=1"]:
            with self.assertRaises(InvalidSpecifier):
                matches("1.0", spec)


class ModuleTests(unittest.TestCase):
    def test_exports(self):
        self.assertEqual(sorted(verspec.__all__), sorted(["InvalidVersion", "InvalidSpecifier", "Version", "parse", "matches", "bump"]))


if __name__ == "__main__":
    unittest.main()
