"""Exceptions raised by tokensel: one class per kind of the library's typed error.

Every class derives from :class:`TokenselError`; bad input also derives from
:class:`ValueError` (so ``except ValueError`` catches it), and the message is the one the
``tokensel`` command line prints.
"""


class TokenselError(Exception):
    """Base class of every tokensel error."""


class InvalidInputError(TokenselError, ValueError):
    """Bad input found before any work (the command line's exit code 2)."""


class ConfigError(InvalidInputError):
    """A config value or an argument is out of its domain (names the field)."""


class ParseError(InvalidInputError):
    """Text or a structure could not be read (TOML, JSON, a trajectory dict)."""


class MismatchError(InvalidInputError):
    """Two inputs that must describe the same run do not (shapes, config keys)."""


class RefusedError(TokenselError, ValueError):
    """A size over a limit, refused before anything is allocated (exit code 3)."""


class NonFiniteError(TokenselError, ArithmeticError):
    """A quantity became NaN or infinite: training stopped (exit code 3)."""


class TokenselIOError(TokenselError, OSError):
    """A file or directory could not be read or written."""


class PathError(InvalidInputError):
    """An output path that cannot be used (one that holds files tokensel did not write,
    a symbolic link, a name too long for its temporary, ...), found before any work."""


__all__ = [
    "TokenselError",
    "InvalidInputError",
    "ConfigError",
    "ParseError",
    "MismatchError",
    "RefusedError",
    "NonFiniteError",
    "TokenselIOError",
    "PathError",
]
