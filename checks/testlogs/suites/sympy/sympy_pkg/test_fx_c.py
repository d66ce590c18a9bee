# The file's last test fails: its line ends in [FAIL].
def test_c_pass():
    assert True


def test_c_last_fails():
    assert False
