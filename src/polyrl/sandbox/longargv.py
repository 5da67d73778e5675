"""Commands longer than bubblewrap takes: the argv goes in a memfd, not on its command line.

bubblewrap refuses a command line of more than ``BWRAP_MAX_ARGS`` (9000) arguments in
all, its own options included ("Exceeded maximum number of arguments"), far below the
kernel's limit (``ARG_MAX``, bytes). Such a command is started as ``python -I -S -c
_EXEC_FROM_FD FD`` instead: a small program that reads the real argv and environment
from the memfd ``FD``, closes it and executes the command in its place (same pid, so
pid 1 stays pid 1; nothing stays behind). It costs one interpreter start (~15-25 ms),
only for such commands. A command past the kernel's own limit still gets exit 126
"Argument list too long", as everywhere else. The environment travels in the memfd too:
an interpreter may add to its own (locale coercion, PEP 538).
"""

from __future__ import annotations

import marshal
import os

from polyrl.sandbox import utf8

BWRAP_MAX_ARGS = 9000
"""bubblewrap's limit on its argc (options + command; bubblewrap 0.4-0.11: ``MAX_ARGS``)."""

HEADROOM = 64
"""Arguments kept free for options added after ``prepare`` (``add_bwrap_options``, the
root fallback's trampoline)."""

_EXEC_FROM_FD = """\
import marshal, os, sys
fd = int(sys.argv[1])
with os.fdopen(fd, "rb") as f:
    argv, env, name = marshal.loads(f.read())
try:
    if not argv[0]:
        raise FileNotFoundError(2, "No such file or directory")
    os.execvpe(argv[0], argv, env)
except OSError as e:  # as a warm execution words it, with the program's status
    os.write(2, b"polyrl sandbox: " + name + b": " + (e.strerror or str(e)).encode() + b"\\n")
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
"""


def needs_memfd(n_options: int, argv: list[bytes]) -> bool:
    """Whether ``n_options`` bwrap arguments plus ``argv`` are more than bubblewrap takes
    (with ``HEADROOM`` kept free)."""
    return n_options + len(argv) > BWRAP_MAX_ARGS - HEADROOM


def via_memfd(argv: list[bytes], env: dict[str, str], python: str, *, name: bytes
              ) -> tuple[list[bytes], int]:
    """``(short argv, fd)``: an argv of 6 arguments that executes ``argv`` (bytes, as the
    sandbox sees them) with exactly ``env``, read from the new memfd ``fd`` (inheritable:
    pass it to bwrap, close it after the start). ``python`` must be visible inside the
    sandbox at the same path (the sandbox's interpreter is). When ``argv`` cannot be
    executed (not found, not executable, over the kernel's limit) the program exits 127
    (not found) or 126 with ``polyrl sandbox: NAME: REASON`` on stderr, ``name`` being
    the program's own name (not the cold init's, when ``argv`` starts with it).

    Raises:
        OSError: no memfd could be made (``memfd_create``; Linux >= 3.17).
    """
    fd = os.memfd_create("polyrl-argv", 0)  # no MFD_CLOEXEC: bwrap passes it on
    try:
        data = marshal.dumps(([bytes(a) for a in argv], utf8.encode_env(env), bytes(name)))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return [os.fsencode(python), b"-I", b"-S", b"-c", _EXEC_FROM_FD.encode(),
            str(fd).encode()], fd
