"""Config: lookups with defaults and conversions over loaded sections."""

from .convert import as_bool, as_int, as_list
from .parser import load, loads

_MISSING = object()


class Config:
    """Read access to {section: {key: value}}, section and key names in any case."""

    def __init__(self, data):
        self._data = {s.lower(): {k.lower(): v for k, v in keys.items()} for s, keys in data.items()}

    @classmethod
    def from_text(cls, text):
        return cls(loads(text))

    @classmethod
    def from_file(cls, path):
        return cls(load(path))

    def sections(self):
        return sorted(self._data)

    def keys(self, section):
        return sorted(self._data.get(section.lower(), {}))

    def get(self, section, key, default=_MISSING):
        """The value of ``key`` in ``section``; ``default`` when missing, else KeyError naming both."""
        try:
            return self._data[section.lower()][key.lower()]
        except KeyError:
            if default is _MISSING:
                raise KeyError("no key %r in section [%s]" % (key, section)) from None
            return default

    def _typed(self, convert, section, key, default):
        try:
            value = self.get(section, key)
        except KeyError:
            if default is _MISSING:
                raise
            return default
        return convert(value)

    def getbool(self, section, key, default=_MISSING):
        return self._typed(as_bool, section, key, default)

    def getint(self, section, key, default=_MISSING):
        return self._typed(as_int, section, key, default)

    def getlist(self, section, key, default=_MISSING):
        return self._typed(as_list, section, key, default)
