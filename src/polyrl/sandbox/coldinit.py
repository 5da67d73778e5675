"""The init of cold sandbox executions: a tiny static program that runs as pid 1 of the
execution's pid namespace (bwrap ``--as-pid-1``), forks the program and waits for it.

Without it, the program itself is pid 1 (so that its CPU time and peak memory reach the
host's ``wait4``: bwrap's own init is never waited for, its usage is lost), and pid 1
differs from any other process: the kernel drops the signals it sends itself without a
handler (``os.kill(os.getpid(), SIGTERM)`` went on running, ``abort()`` died of SIGSEGV,
not SIGABRT), and its orphans stay zombies that count against ``max_pids`` (Python
reaps none). With it, the program is pid 2 and behaves as in a warm, fork-server or
``process`` execution, its usage still reaches ``wait4`` (the init's, which waits for
it), and every signal the host sends but SIGKILL reaches the program (blocked in the
init). What it does, step by step, is in ``coldinit_x86_64.S``; its bytes are below
(``tests/sandbox/test_coldinit.py`` assembles the source and compares).

x86_64 only; elsewhere, or where the kernel refuses to execute a memfd
(``vm.memfd_noexec``), :func:`init_fd` is None and the program is pid 1 as before.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading

_CODE = {"x86_64": bytes.fromhex(
    "4989e4bf03000000beffffffff31d2b8b40100000f054885c07418bb0300000089dfb8030000000f"
    "05ffc381fb0004000072ed4881ec4010000048c70424ffffffff31ff4889e6488d54240841ba0800"
    "0000b80e0000000f05b8390000000f054885c00f84ad0000000f88990000004989c5bfffffffff48"
    "8d742410ba000000404531d2b83d0000000f054c39e874124883f8fc74dc4885c07fd7bf7d000000"
    "eb228b4424103c7f74c889c783e77f740881c780000000eb0b89c7c1ef0881e7ff00000089fdb827"
    "0000000f0583f801752dbfffffffffbe09000000b83e0000000f05bfffffffff31f6ba0000004045"
    "31d2b83d0000000f054883f8f675d389efb8e70000000f0589c5488d1d25020000e97d010000bf02"
    "000000488d74240831d241ba08000000b80e0000000f054d8d742410498b0c244d8d7ccc10498b1e"
    "bdf2ffffff4885db750c488d1de9010000e93d010000bdfeffffff803b000f842f0100004889df8a"
    "0784c074203c2f740548ffc7ebf14889df4c89f64c89fab83b0000000f0589c5e9060100004889f8"
    "4829d8bddcffffff483dff0000000f87ef0000004d89f8498b304885f6741a813e50415448750c80"
    "7e043d75064c8d4e05eb0d4983c008ebde4c8d0d6b010000c744242000000000488d7c24404c8d94"
    "243f1000004c89ce8a0684c074133c3a740f4c39d77363880748ffc748ffc6ebe7488d4424404839"
    "c77406c6072f48ffc74889da4c39d773418a02880748ffc748ffc284c075ed4889742418488d7c24"
    "404c89f64c89fab83b0000000f05488b74241883f8fe743083f8ec742b837c242000752489442420"
    "eb1e837c2420007508c7442420dcffffff8a0684c074093c3a740548ffc6ebf1803e0074094c8d4e"
    "01e952ffffff8b6c242085ed7505bdfeffffff488d3589000000ba10000000e8720000004889de31"
    "d2803c16007404ffc2ebf6e85e000000488d3574000000ba02000000e84d000000f7dd488d357700"
    "00000fb6060fb656014883c60285c0740939e874054801d6ebe8e827000000488d353f000000ba01"
    "000000e816000000bf7e00000083fd027505bf7f000000b8e70000000f05bf02000000b801000000"
    "0f05c3706f6c79726c2073616e64626f783a203a200a666f726b002f62696e3a2f7573722f62696e"
    "0002194e6f20737563682066696c65206f72206469726563746f72790d115065726d697373696f6e"
    "2064656e69656408114578656320666f726d6174206572726f720716417267756d656e74206c6973"
    "7420746f6f206c6f6e67140f4e6f742061206469726563746f7279150e4973206120646972656374"
    "6f72792821546f6f206d616e79206c6576656c73206f662073796d626f6c6963206c696e6b732412"
    "46696c65206e616d6520746f6f206c6f6e671a0e546578742066696c6520627573790c1643616e6e"
    "6f7420616c6c6f63617465206d656d6f72790b205265736f757263652074656d706f726172696c79"
    "20756e617661696c61626c65000e63616e6e6f742065786563757465")}
"""Machine code by architecture: ``coldinit_x86_64.S`` assembled (``.text``, no relocations)."""

_lock = threading.Lock()
_fd: int | None = None
_tried = False


def elf_x86_64(code: bytes) -> bytes:
    """A static ELF64 executable for x86_64 whose one segment (read + execute, at
    0x400000) is ``code``, entered at its first byte. ``code`` must be
    position-independent and keep its data on the stack."""
    base, head = 0x400000, 64 + 56
    size = head + len(code)
    return (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(  # ELF64, little-endian
        "<HHIQQQIHHHHHH", 2, 0x3E, 1, base + head, 64, 0, 0, 64, 56, 1, 0, 0, 0)
        + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code)


def init_fd() -> int | None:
    """A descriptor (close-on-exec in this process) of a sealed, execute-only memfd
    holding the cold init for this machine, made and tried once per process: run
    through ``/proc/self/fd/N`` it must run ``true`` and exit 0. None when there is no
    init for this architecture or the kernel refused it; a cold execution then runs its
    program as pid 1. The seals (no write, resize or new seal) keep any process that
    reaches the file from changing what later executions run."""
    global _fd, _tried
    with _lock:
        if not _tried:
            _tried = True
            _fd = _make()
        return _fd


def _make() -> int | None:
    code = _CODE.get(os.uname().machine)
    if code is None:
        return None
    try:
        fd = os.memfd_create("polyrl-cold-init", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return None
    try:
        os.write(fd, elf_x86_64(code))
        os.fchmod(fd, 0o111)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        pid = os.posix_spawn(f"/proc/self/fd/{fd}", ["init", "true"],
                             {"PATH": "/usr/bin:/bin"})
        if os.waitpid(pid, 0)[1] == 0:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None
