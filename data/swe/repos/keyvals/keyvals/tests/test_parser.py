import pytest

from keyvals import Config, ParseError, load, loads


def test_sections_and_pairs():
    text = "[server]\nhost = example.org\nport: 8080\n\n[client]\nretries = 3\n"
    assert loads(text) == {"server": {"host": "example.org", "port": "8080"}, "client": {"retries": "3"}}


def test_pairs_before_any_section():
    assert loads("name = demo\n[x]\n") == {"default": {"name": "demo"}, "x": {}}
    assert loads("name = demo\n", default_section="top") == {"top": {"name": "demo"}}


def test_names_are_lower_case():
    assert loads("[Server]\nHost = A\n") == {"server": {"host": "A"}}


def test_comment_lines_and_blank_lines():
    text = "# settings\n; old style\n\n[a]\n  # indented comment\nk = v\n"
    assert loads(text) == {"a": {"k": "v"}}


def test_quotes_removed_once():
    assert loads('a = "two words"\nb = \'x\'\nc = ""\n')["default"] == {"a": "two words", "b": "x", "c": ""}


def test_hash_and_semicolon_inside_quotes_kept():
    assert loads('title = "fish # chips; peas"\n')["default"]["title"] == "fish # chips; peas"


def test_last_value_wins():
    assert loads("k = 1\nk = 2\n") == {"default": {"k": "2"}}


def test_empty_value():
    assert loads("k =\n") == {"default": {"k": ""}}


def test_inline_comments_are_not_part_of_the_value():
    text = "[server]\nport = 8080  # the default\nroot = /srv/www ; moved in 2024\nurl = http://example.org/#top\n"
    assert loads(text)["server"] == {"port": "8080", "root": "/srv/www", "url": "http://example.org/#top"}
    assert Config.from_text(text).getint("server", "port") == 8080


def test_bad_line_names_its_number():
    with pytest.raises(ParseError) as info:
        loads("[a]\nk = v\njust words\n")
    assert info.value.line == 3
    assert "line 3" in str(info.value)


def test_load_from_file(tmp_path):
    path = tmp_path / "app.conf"
    path.write_text("[db]\nname = main\n", encoding="utf-8")
    assert load(str(path)) == {"db": {"name": "main"}}


class TestConfig:
    text = "[server]\nport = 8080\nhosts = a, b ,c\ndebug = yes\n[empty]\n"

    def test_get(self):
        c = Config.from_text(self.text)
        assert c.get("SERVER", "Port") == "8080"

    def test_missing_key_names_it(self):
        c = Config.from_text(self.text)
        with pytest.raises(KeyError, match="timeout"):
            c.get("server", "timeout")

    def test_defaults(self):
        c = Config.from_text(self.text)
        assert c.getint("server", "timeout", 30) == 30
        assert c.get("nowhere", "x", None) is None

    def test_typed(self):
        c = Config.from_text(self.text)
        assert c.getint("server", "port") == 8080
        assert c.getlist("server", "hosts") == ["a", "b", "c"]
        assert c.getbool("server", "debug") is True

    def test_sections_and_keys(self):
        c = Config.from_text(self.text)
        assert c.sections() == ["empty", "server"]
        assert c.keys("server") == ["debug", "hosts", "port"]
