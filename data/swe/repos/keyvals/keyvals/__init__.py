"""Settings files of `key = value` lines under `[section]` headers, and typed reads of their values."""

from .config import Config
from .convert import as_bool, as_int, as_list
from .parser import ParseError, load, loads

__all__ = ["Config", "ParseError", "as_bool", "as_int", "as_list", "load", "loads"]
__version__ = "0.7.1"
