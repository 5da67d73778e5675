"""Private workspaces on the host: create, fill with files, collect files back, snapshot.

Collection never follows symlinks (a program may plant ``out.txt -> /etc/shadow``;
the host, often root, must not read it on the program's behalf).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Callable

from polyrl.errors import ConfigError, SandboxError
from polyrl.sandbox.utf8 import encode


def private_dir(name: str, mode: int, parent: str | None = None) -> str:
    """``<parent>/<name>-<euid>`` (default parent ``$TMPDIR``), created with ``mode``;
    refuses one owned by someone else or a symlink (another local user must not be able
    to pre-create it).

    Raises:
        SandboxError: the directory exists but is not ours.
    """
    path = os.path.join(parent or tempfile.gettempdir(), f"{name}-{os.geteuid()}")
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not os.path.stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"{path} is not a directory owned by uid {os.geteuid()}; remove it")
    os.chmod(path, mode)
    return path


def _base_dir() -> str:
    """Where the workspaces of executions live: under ``$TMPDIR``, else under
    ``/var/tmp`` when ``$TMPDIR``'s filesystem is mounted ``noexec`` (a hardened
    ``/tmp``): a cold execution binds its workspace from here, the flag stays in the
    sandbox, and a program could not run a script it wrote (``./s.sh``: Permission
    denied) where a warm one could.

    Raises:
        SandboxUnavailableError: both are noexec (says to set TMPDIR).
    """
    for parent in (tempfile.gettempdir(), "/var/tmp"):
        if os.path.isdir(parent) and not os.statvfs(parent).f_flag & os.ST_NOEXEC:
            # the sandbox uid may traverse, not list
            return private_dir("polyrl-sandbox-ws", 0o711, parent)
    from polyrl.errors import SandboxUnavailableError

    raise SandboxUnavailableError(
        f"TMPDIR={tempfile.gettempdir()} and /var/tmp are on filesystems mounted noexec: "
        "sandboxed programs could not run the files they write; set TMPDIR to a "
        "directory on a filesystem without noexec")


NAME_MAX_BYTES = 255
"""The longest component of a workspace file name, in UTF-8 bytes (Linux ``NAME_MAX``)."""
PATH_MAX_BYTES = 4096 - 256
"""The longest workspace file name (its UTF-8 bytes, normalised): ``PATH_MAX`` less room
for the directory that holds the workspace on every path (a fork-server job directory)."""


def _safe_rel(path: str | os.PathLike[str]) -> str:
    """Normalise a workspace-relative path (``str`` or ``os.PathLike``); reject absolute
    paths, ``..``, NUL bytes, names with no UTF-8 bytes (lone surrogates that are no
    surrogate escapes: a name's bytes are its UTF-8 on every host, ``utf8``) and names
    no path can hold: a component over ``NAME_MAX_BYTES`` or a whole over
    ``PATH_MAX_BYTES`` (a cold execution raised a bare OSError, ENAMETOOLONG, a warm
    one a SandboxError, or took a name the other refused).

    Raises:
        ConfigError: any of these (key path ``files``).
    """
    try:
        path = os.fspath(path)
        if "\0" in path:
            raise ValueError("a NUL byte")
        encode(path)
    except (ValueError, TypeError) as e:  # UnicodeEncodeError is a ValueError
        raise ConfigError("<sandbox>", "files", f"{path!r} is no usable file name: {e}") from None
    norm = os.path.normpath(path)
    if os.path.isabs(path) or norm == ".." or norm.startswith("../") or norm == ".":
        raise ConfigError("<sandbox>", "files", f"{path!r} must be a relative path inside the "
                          "workspace (no leading '/', no '..')")
    data = encode(norm)
    if len(data) > PATH_MAX_BYTES or max(map(len, data.split(b"/"))) > NAME_MAX_BYTES:
        raise ConfigError("<sandbox>", "files", f"{path[:80]!r}... is too long a file name (at "
                          f"most {NAME_MAX_BYTES} bytes a component, {PATH_MAX_BYTES} in all, "
                          "UTF-8)")
    return norm


def collect_names(paths: list[str] | list[os.PathLike[str]] | None) -> list[str] | None:
    """``paths`` (names of workspace files to collect) as ``str``, each checked as
    :func:`_safe_rel` does: the keys of ``ExecResult.files`` on every path.

    Raises:
        ConfigError: a name is absolute, escapes the workspace or is no usable file name.
    """
    if not paths:
        return None
    for rel in paths:
        _safe_rel(rel)
    return [os.fspath(rel) for rel in paths]


def bindable_dir(prefix: str) -> str:
    """A new empty host folder (mode 0755) that a sandbox may bind: under the workspaces'
    base (``_base_dir``: traversable by a private sandbox uid, not ``noexec``), for
    read-only mounts such as a grader's test files. The caller removes it.

    Raises:
        SandboxUnavailableError: as ``_base_dir``.
    """
    path = tempfile.mkdtemp(prefix=prefix, dir=_base_dir())
    os.chmod(path, 0o755)
    return path


class Workspace:
    """One host directory that a sandbox mounts read-write at ``/workspace``.

    Attributes:
        path: host path of its files (mode 0700, owned by ``uid`` when given).
        host_dir: the directory on the host that bwrap binds: ``path``, unless a
            session keeper's tmpfs covers it (``polyrl.sandbox.keeper``); then ``path``
            reaches the tmpfs through a descriptor (``/proc/<pid>/fd/<fd>/.``).
        uid: host uid that owns it (the sandbox's slot uid), or None for the current user.
    """

    def __init__(self, uid: int | None = None) -> None:
        self.uid = uid
        base = _base_dir()
        if uid is not None:
            from polyrl.errors import SandboxUnavailableError
            from polyrl.sandbox.hostview import _hidden_root

            hidden = _hidden_root(os.path.join(base, "x"))
            if hidden is not None:  # bwrap, as the slot uid, could not reach it (ENOENT)
                raise SandboxUnavailableError(
                    f"the sandbox workspaces are under TMPDIR={tempfile.gettempdir()}, which "
                    f"the sandbox's private uids cannot reach ({hidden} is mode "
                    f"{os.stat(hidden).st_mode & 0o777:o}, no search permission for "
                    "others); set TMPDIR to a directory every user may traverse, e.g. /tmp")
        self.path = os.path.join(base, uuid.uuid4().hex)
        self.host_dir = self.path
        os.mkdir(self.path, 0o700)
        self._chown(self.path)

    def _chown(self, p: str) -> None:
        if self.uid is not None:
            os.lchown(p, self.uid, self.uid)

    def write_files(self, files: dict[str, str | bytes] | None) -> None:
        """Write ``files`` (relative path -> text or bytes) into the workspace, parents created.
        Names and text are written UTF-8 encoded, whatever the host's locale.

        Every path component is opened relative to the one before it and never through
        a symlink, so a link planted by a program cannot redirect the host's write.

        Raises:
            ConfigError: a path is absolute or escapes the workspace.
            SandboxError: a component is a symlink or not a directory.
        """
        for rel, content in (files or {}).items():
            rel = _safe_rel(rel)
            data = content.encode() if isinstance(content, str) else bytes(content)
            parent = self._open_parent(rel, create=True)
            try:  # O_NONBLOCK: a fifo planted there fails (ENXIO) instead of blocking
                fd = os.open(encode(os.path.basename(rel)),
                             os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, 0o644, dir_fd=parent)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    raise SandboxError(f"workspace path {rel!r} is not a regular file") from e
                raise _link_error(e, f"workspace path {rel!r} is a symlink") from e
            finally:
                os.close(parent)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise SandboxError(f"workspace path {rel!r} is not a regular file")
                os.set_blocking(fd, True)
                os.ftruncate(fd, 0)
                os.write(fd, data) if data else None
                os.fchmod(fd, 0o644)  # whatever the host's umask
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
            finally:
                os.close(fd)

    def _open_parent(self, rel: str, *, create: bool) -> int:
        """fd of the directory that holds ``rel``'s last component (see ``write_files``).

        Raises:
            SandboxError: a component is a symlink or not a directory.
            FileNotFoundError: a component is missing (and ``create`` is False).
        """
        fd = os.open(self.path, _DIR_FLAGS)
        try:
            for part in encode(rel).split(b"/")[:-1]:
                made = False
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        made = True
                        if self.uid is not None:
                            os.chown(part, self.uid, self.uid, dir_fd=fd,
                                     follow_symlinks=False)
                    except FileExistsError:
                        pass
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    raise _link_error(e, f"workspace path {rel!r} goes through a symlink") from e
                os.close(fd)
                fd = nfd
                if made:
                    os.fchmod(fd, 0o755)  # whatever the host's umask
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_file(self, rel: str, max_bytes: int = 64 << 20) -> bytes:
        """Read one workspace file without following symlinks anywhere on its path
        (``rel``: the UTF-8 name, as ``write_files``).

        Raises:
            FileNotFoundError: missing; SandboxError: a symlink, not a regular file, or too big.
        """
        rel = _safe_rel(rel)
        parent = self._open_parent(rel, create=False)
        try:
            fd = os.open(encode(os.path.basename(rel)), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=parent)
        except OSError as e:
            raise _link_error(e, f"refusing to read {rel!r}: it is (or goes through) a "
                                 "symlink") from e
        finally:
            os.close(parent)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SandboxError(f"refusing to read {rel!r}: not a regular file")
            if st.st_size > max_bytes:
                raise SandboxError(f"{rel!r} is {st.st_size} bytes, over {max_bytes}")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def collect(self, paths: list[str] | None) -> dict[str, bytes]:
        """Read the asked-for files; missing/unsafe ones are skipped (absent from the dict)."""
        out: dict[str, bytes] = {}
        for rel in paths or []:
            try:
                out[rel] = self.read_file(rel)
            except (OSError, SandboxError):
                continue
        return out

    def snapshot_to(self, dest: str) -> None:
        """Copy the whole tree to ``dest`` (symlinks copied as links, never followed,
        hard links as links, holes as holes, named pipes made anew; sockets and device
        nodes, which hold no data, are left out).

        Raises:
            SandboxError: something could not be copied (e.g. an unreadable file, a tree
                deeper than Python's recursion limit); nothing of it is left.
        """
        try:
            shutil.copytree(self.path, dest, symlinks=True, copy_function=_link_copier())
        except shutil.Error as e:
            remove_tree(dest)
            first = e.args[0][0] if e.args and e.args[0] else e
            raise SandboxError(f"cannot snapshot the workspace: {first}") from e
        except (OSError, RecursionError) as e:  # a tree deeper than Python's recursion
            if os.path.lexists(dest):
                remove_tree(dest)
            raise SandboxError(f"cannot snapshot the workspace: {e}") from e

    def clear(self) -> None:
        """Empty the workspace in place (its mounts stay valid) and restore its mode 0700.

        Raises:
            OSError: something could not be removed.
        """
        os.chmod(self.path, 0o700)  # the program may have made it read-only
        for name in os.listdir(self.path):
            p = os.path.join(self.path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                remove_tree(p)
            else:
                os.unlink(p)
        if os.listdir(self.path):
            raise OSError(f"workspace {self.path} could not be emptied")

    def restore_from(self, src: str) -> None:
        """Replace the workspace contents by the tree at ``src`` (ownership set to ``uid``)."""
        self.clear()
        shutil.copytree(src, self.path, symlinks=True, dirs_exist_ok=True,
                        copy_function=_link_copier())
        if self.uid is not None:
            for root, dirs, files in os.walk(self.path):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), self.uid, self.uid)

    def remove(self) -> None:
        """Delete the workspace (best effort; the sandbox may have made dirs read-only)."""
        try:
            remove_tree(self.host_dir)
        except OSError:
            pass


def _link_copier() -> Callable[[str, str], str]:
    """A ``copy_function`` for one ``shutil.copytree`` that keeps hard links: the first
    name of a file is copied (``_copy_sparse``, holes kept), its other names in the tree are linked
    to that copy. Copying each name again multiplied the data (measured: 200 links to
    one 15 MiB file, a 16 MiB workspace, made a 3 GiB snapshot on the host)."""
    first: dict[tuple[int, int], str] = {}

    def copy(src: str, dst: str) -> str:
        st = os.lstat(src)
        if stat.S_ISFIFO(st.st_mode):  # a named pipe holds no data: made anew
            os.mkfifo(dst, 0o600)
            os.chmod(dst, stat.S_IMODE(st.st_mode) & 0o777)  # whatever the host's umask
            return dst
        if not stat.S_ISREG(st.st_mode):  # a socket (nothing listens on it once its
            return dst  # step is over) or a device node: nothing to copy, left out
        if st.st_nlink > 1:
            key = (st.st_dev, st.st_ino)
            if key in first:
                os.link(first[key], dst)
                return dst
            first[key] = dst
        _copy_sparse(src, dst)
        shutil.copystat(src, dst)  # as shutil.copy2: mode, times, xattrs
        mode = os.lstat(dst).st_mode
        if mode & 0o7000:  # a program's setuid/setgid/sticky file: never so on the host
            os.chmod(dst, mode & 0o777)  # (copied by root, it would be root's)
        return dst

    return copy


def _copy_sparse(src: str, dst: str) -> None:
    """Copy the regular file ``src`` to the new file ``dst``, holes kept as holes.

    ``shutil.copy2`` writes a hole as zeros: a program's sparse files (``truncate -s``,
    no block allocated, so nothing the workspace measure counts) became real data on
    the host (measured: a 4 KiB workspace of 40 sparse 16 MiB files made a 641 MiB
    snapshot; one step under the default limits may leave 16,384 of 64 MiB: 1 TiB).
    Only the data segments (``SEEK_DATA`` / ``SEEK_HOLE``) are copied.

    Raises:
        shutil.SpecialFileError: ``src`` is no regular file (a fifo: never waited on).
        OSError: a read or write failed.
    """
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise shutil.SpecialFileError(f"`{src}` is not a regular file")
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600)
        try:
            pos = 0
            while pos < st.st_size:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:  # only a hole is left
                        break
                    raise
                end = min(os.lseek(fd, start, os.SEEK_HOLE), st.st_size)
                while start < end:
                    chunk = os.pread(fd, min(end - start, 1 << 20), start)
                    if not chunk:  # the file shrank meanwhile
                        end = start
                        break
                    os.pwrite(out, chunk, start)
                    start += len(chunk)
                pos = end
            os.ftruncate(out, st.st_size)
        finally:
            os.close(out)
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _link_error(e: OSError, message: str) -> OSError:
    """``SandboxError(message)`` for a symlink / non-directory on the way, else ``e``."""
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return SandboxError(message)
    return e


def remove_tree(path: str) -> None:
    """Delete the directory ``path`` and everything in it, never following a symlink.

    ``shutil.rmtree`` first (descends by file descriptor, so a link cannot redirect
    it); what it leaves (directories a program made unreadable, trees deeper than
    Python's recursion limit) goes to ``chmod -R u+rwx`` and ``rm -rf``, which never
    follow links found inside the tree either.

    Raises:
        OSError: ``path`` still exists afterwards.
    """
    try:
        shutil.rmtree(path)
        return
    except (OSError, RecursionError):
        pass
    for argv in (["chmod", "-R", "u+rwx", "--", path],
                 ["rm", "-rf", "--one-file-system", "--", path]):
        try:
            subprocess.run(argv, capture_output=True, timeout=600)
        except (OSError, subprocess.SubprocessError):
            pass
    if os.path.lexists(path):
        raise OSError(f"could not remove {path}")
