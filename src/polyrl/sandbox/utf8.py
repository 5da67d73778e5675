"""The one encoding of polyrl's ``str`` API at the sandbox boundary: UTF-8, on every host.

Sandboxed programs run in a UTF-8 locale whatever the host's (``LANG`` / ``LC_ALL``
``C.UTF-8``, ``bwrap.sandbox_env``), so every ``str`` handed to one becomes its UTF-8
bytes here: argv, environment names and values, workspace file names and the working
directory, on every backend and path (cold, warm, fork-server, sessions, ``process``).
Python's own conversion (``os.fsencode``, which ``subprocess`` and ``os.open`` apply to
a ``str``) follows the *host's* locale instead: under ``LANG=de_DE.ISO-8859-1`` it made
``"é"`` the byte 0xE9 (the program saw invalid UTF-8, its output came back as U+FFFD)
and refused ``"✓"`` (UnicodeEncodeError). ``bytes`` pass through unchanged; a ``str``
holding surrogate escapes (``os.fsdecode`` / ``os.listdir`` of undecodable bytes on a
UTF-8 host) gets its original bytes back. Output comes back decoded as UTF-8 with
errors replaced (``result.to_exec_result``).

Host paths (the workspace directory, the Python installation, bwrap itself) are not
converted here: they name host files and keep the host's encoding.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping


def encode(text: str | bytes | os.PathLike) -> bytes:
    """``text`` as the bytes a sandboxed program gets: UTF-8 (surrogate escapes give their
    bytes back); ``bytes`` unchanged; an ``os.PathLike`` by its ``os.fspath``.

    Raises:
        UnicodeEncodeError: a lone surrogate that is no surrogate escape (U+D800-U+DC7F).
        TypeError: neither str, bytes nor os.PathLike.
    """
    text = os.fspath(text)
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")


def encode_argv(argv: Iterable[str | bytes]) -> list[bytes]:
    """Each argument :func:`encode`-d (the program's ``argv`` bytes). Raises as ``encode``."""
    return [encode(a) for a in argv]


def encode_env(env: Mapping[str, str] | Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    """Names and values :func:`encode`-d (``subprocess.Popen(env=...)`` takes bytes as they
    are). Raises as ``encode``."""
    return {encode(k): encode(v) for k, v in env.items()}


def check_command(argv: Iterable[str | bytes], env: Mapping[str, str] | None = None,
                  cwd: str | bytes | None = None) -> None:
    """Refuse, before anything starts, a command that no program could be given: an
    argument, environment name or value, or working directory holding a NUL byte or a
    lone surrogate that is no surrogate escape (no UTF-8 bytes, :func:`encode`), or an
    environment name that is empty or holds ``=`` (``execve`` would make it another
    variable: ``{"A=B": "c"}`` is ``A`` = ``"B=c"``). Without this a cold execution
    raised ValueError / UnicodeEncodeError from ``subprocess`` and a warm one reported
    exit 125 with nothing on stderr.

    Raises:
        ConfigError: key path ``argv``, ``env`` or ``cwd``, naming the offending value.
    """
    from polyrl.errors import ConfigError

    def usable(key: str, value: object, name: bool = False) -> None:
        try:
            data = encode(value)  # type: ignore[arg-type]
        except (UnicodeEncodeError, TypeError) as e:
            raise ConfigError("<sandbox>", key, f"{value!r} cannot be passed: {e}") from None
        if b"\0" in data:
            raise ConfigError("<sandbox>", key, f"{value!r} holds a NUL byte")
        if name and (not data or b"=" in data):
            raise ConfigError("<sandbox>", key, f"{value!r} is no environment variable "
                              "name (empty, or holds '=')")

    for arg in argv:
        usable("argv", arg)
    for k, v in (env or {}).items():
        usable("env", k, name=True)
        usable("env", v)
    if cwd is not None:
        usable("cwd", cwd)
