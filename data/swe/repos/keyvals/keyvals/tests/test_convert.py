import pytest

from keyvals import Config, as_bool, as_int, as_list


@pytest.mark.parametrize("word", ["1", "true", "True", "YES", "on", "On"])
def test_true_words(word):
    assert as_bool(word) is True


def test_false_zero_and_false():
    assert as_bool("0") is False
    assert as_bool("false") is False


def test_bools_pass_through():
    assert as_bool(False) is False


def test_false_words():
    for word in ["no", "off", "NO", " Off ", "False"]:
        assert as_bool(word) is False, word
    assert Config.from_text("[s]\ncolor = off\n").getbool("s", "color") is False


def test_other_words_are_errors():
    for word in ["maybe", "", "2", "yess"]:
        with pytest.raises(ValueError):
            as_bool(word)


def test_int_decimal():
    assert as_int(" 42 ") == 42
    assert as_int("-7") == -7
    assert as_int("1_000") == 1000


def test_int_prefixes():
    assert as_int("0x1F") == 31
    assert as_int("0o17") == 15
    assert as_int("0b101") == 5
    assert as_int("-0x10") == -16


def test_int_leading_zero_is_decimal():
    assert as_int("08") == 8


def test_int_errors():
    for text in ["", "4.5", "ten", "0x"]:
        with pytest.raises(ValueError):
            as_int(text)


def test_list():
    assert as_list("a, b,,c ") == ["a", "b", "c"]
    assert as_list("x|y", separator="|") == ["x", "y"]
    assert as_list("") == []
    assert as_list(["kept"]) == ["kept"]
