"""The sandbox's ``/etc``: a read-only copy of the few host entries programs need.

Only what every local user of the host may read is copied: a regular file readable by
"others", a directory that "others" may list and enter, symbolic links (copied as links,
never followed, so they resolve inside the sandbox). A host secret kept from other users
by its permissions (``/etc/ssl/private``, ``/etc/shadow``) is never copied, even when
polyrl runs as root; copies keep the host's permission bits (never widened, setuid,
setgid and sticky bits dropped). Fifos, sockets and devices are skipped.

The copy is made once per process, in ``/dev/shm`` where that is a writable tmpfs (720
symbolic links of ``/etc/alternatives`` and ``/etc/ssl/certs`` took 0.13-0.66 s on an ext4
``/tmp`` here, 0.04 s on tmpfs), else in the default temporary directory, and removed at
exit of the process that made it (a forked child's exit leaves it; a copy that went
missing, e.g. cleaned from ``/dev/shm``, is made again: without it every cold execution
would fail to start). One bind mount of the copy is ~15 ms cheaper per cold execution than one per entry.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile

ETC_NAMES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "ssl",
             "ca-certificates", "nsswitch.conf", "passwd", "group", "hosts", "mime.types",
             "protocols", "services", "os-release", "debian_version", "fonts", "resolv.conf",
             "host.conf", "gai.conf")
"""The ``/etc`` entries a sandbox sees (never ``shadow``, ``sudoers``, ...)."""

_MAX_FILE_BYTES = 16 << 20  # a bigger "config" file is no config: skipped


def _world_readable(st: os.stat_result) -> bool:
    """Whether any local user may read this file, or list and enter this directory."""
    if stat.S_ISDIR(st.st_mode):
        return st.st_mode & 0o005 == 0o005
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o004)


def _copy_file(src: str, dst: str, st: os.stat_result) -> None:
    if st.st_size > _MAX_FILE_BYTES:
        return
    with open(src, "rb") as fin:
        data = fin.read(_MAX_FILE_BYTES + 1)
    if len(data) > _MAX_FILE_BYTES:
        return
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, st.st_mode & 0o777)
    finally:
        os.close(fd)


def _copy_tree(src: str, dst: str, st: os.stat_result) -> None:
    os.mkdir(dst, 0o700)
    try:
        entries = list(os.scandir(src))
    except OSError:
        entries = []
    for entry in entries:
        _copy_entry(entry.path, os.path.join(dst, entry.name), follow=False)
    os.chmod(dst, st.st_mode & 0o777)


def _copy_entry(src: str, dst: str, follow: bool) -> None:
    """Copy ``src`` to ``dst`` if every local user may read it (see the module doc).
    ``follow``: a symbolic link is copied as the entry it names (top-level entries,
    e.g. ``localtime``), else as a link. Unreadable or vanished entries are skipped."""
    try:
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            if not follow:
                os.symlink(os.readlink(src), dst)
                return
            st = os.stat(src)
        if not _world_readable(st):
            return
        if stat.S_ISDIR(st.st_mode):
            _copy_tree(src, dst, st)
        else:
            _copy_file(src, dst, st)
    except OSError:
        return  # unreadable or gone: the sandbox does without it


def copy_etc(dest: str, src: str = "/etc", names: tuple[str, ...] = ETC_NAMES) -> str:
    """Fill the existing directory ``dest`` with the world-readable part of ``names``
    beneath ``src`` (rules: module doc) and make ``dest`` itself ``0755``; returns
    ``dest``. Entries that are missing or unreadable are left out, never an error."""
    for name in names:
        _copy_entry(os.path.join(src, name), os.path.join(dest, name), follow=True)
    os.chmod(dest, 0o755)
    return dest


def _scratch_base() -> str | None:
    shm = "/dev/shm"
    try:
        if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) \
                and os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize > 16 << 20:
            return shm
    except OSError:
        pass
    return None  # tempfile's default


_view: list[str] = []  # [path] of this process's copy, once made


def etc_view() -> str:
    """The directory bound read-only at ``/etc`` in every bwrap sandbox of this process,
    made on first use (and again if something removed it) and removed at exit by the
    process that made it, never by a forked child (see the module doc). Raises OSError
    when no temporary directory is writable."""
    if _view and os.path.isdir(_view[0]):
        return _view[0]
    dest = tempfile.mkdtemp(prefix="polyrl-sandbox-etc-", dir=_scratch_base())
    try:
        copy_etc(dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(dest, True))
    _view[:] = [dest]
    return dest
