import pytest

from durations import format_duration, parse_duration


def test_largest_units_first():
    assert format_duration(5400) == "1h30m"
    assert format_duration(90061) == "1d1h1m1s"
    assert format_duration(1209600) == "2w"


def test_zero():
    assert format_duration(0) == "0s"
    assert format_duration(0.2) == "0s"
    assert format_duration(0, precision="m") == "0m"


def test_negative():
    assert format_duration(-90) == "-1m30s"


def test_milliseconds():
    assert format_duration(0.25, precision="ms") == "250ms"
    assert format_duration(1.5, precision="ms") == "1s500ms"


def test_coarse_precision():
    assert format_duration(5415, precision="m") == "1h30m"


def test_bad_precision():
    with pytest.raises(ValueError):
        format_duration(1, precision="y")


@pytest.mark.parametrize("seconds", [1, 59, 3600, 5415, 90061])
def test_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_round_trip_negative():
    assert parse_duration(format_duration(-5400)) == -5400
    assert parse_duration(format_duration(-90061)) == -90061


def test_rounding_carries_into_larger_units():
    assert format_duration(3599.6) == "1h"
    assert format_duration(59.7) == "1m"
    assert format_duration(86399.9) == "1d"
    assert format_duration(0.9996, precision="ms") == "1s"
