# Every test passes: the file's last line ends in [OK].
def test_one():
    assert True


def test_two():
    assert 2 > 1


def test_three():
    assert "a" in "abc"
