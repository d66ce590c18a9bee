import pytest

from durations import DurationError, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("2m", 120), ("1h", 3600), ("1d", 86400), ("1w", 604800), ("250ms", 0.25)],
)
def test_single_unit(text, seconds):
    assert parse_duration(text) == seconds


def test_compound():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d 4h") == 187200
    assert parse_duration("1h 30m 15s") == 5415


def test_fractions():
    assert parse_duration("1.5h") == 5400
    assert parse_duration(".5m") == 30


def test_unit_names():
    assert parse_duration("2 hours 5 minutes") == 7500
    assert parse_duration("1 day") == 86400


def test_case_insensitive():
    assert parse_duration("1H30M") == 5400


def test_negative_single_unit():
    assert parse_duration("-45s") == -45


def test_clock():
    assert parse_duration("1:30:00") == 5400
    assert parse_duration("4:05") == 245
    assert parse_duration("-0:30") == -30


def test_numbers_pass_through():
    assert parse_duration(12) == 12.0


def test_sign_applies_to_the_whole_duration():
    assert parse_duration("-1h30m") == -5400
    assert parse_duration("+1h30m") == 5400
    assert parse_duration("- 2m 30s") == -150


@pytest.mark.parametrize("text", ["", "h", "1x", "1h1h", "1:60", "abc", "1h2", "--1h", None, True])
def test_errors(text):
    with pytest.raises(DurationError):
        parse_duration(text)
