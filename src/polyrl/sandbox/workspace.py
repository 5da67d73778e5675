"""Private workspaces on the host: create, fill with files, collect files back, snapshot.

Collection never follows symlinks (a program may plant ``out.txt -> /etc/shadow``;
the host, often root, must not read it on the program's behalf).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

from polyrl.errors import ConfigError, SandboxError


def private_dir(name: str, mode: int) -> str:
    """``$TMPDIR/<name>-<euid>``, created with ``mode``; refuses one owned by someone else
    or a symlink (another local user must not be able to pre-create it).

    Raises:
        SandboxError: the directory exists but is not ours.
    """
    path = os.path.join(tempfile.gettempdir(), f"{name}-{os.geteuid()}")
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
    return private_dir("polyrl-sandbox-ws", 0o711)  # the sandbox uid may traverse, not list


def _safe_rel(path: str) -> str:
    """Normalise a workspace-relative path; reject absolute paths and ``..``."""
    norm = os.path.normpath(path)
    if os.path.isabs(path) or norm == ".." or norm.startswith("../") or norm == ".":
        raise ConfigError("<sandbox>", "files", f"{path!r} must be a relative path inside the "
                          "workspace (no leading '/', no '..')")
    return norm


class Workspace:
    """One host directory that a sandbox mounts read-write at ``/workspace``.

    Attributes:
        path: host path (mode 0700, owned by ``uid`` when given).
        uid: host uid that owns it (the sandbox's slot uid), or None for the current user.
    """

    def __init__(self, uid: int | None = None) -> None:
        self.uid = uid
        self.path = os.path.join(_base_dir(), uuid.uuid4().hex)
        os.mkdir(self.path, 0o700)
        self._chown(self.path)

    def _chown(self, p: str) -> None:
        if self.uid is not None:
            os.lchown(p, self.uid, self.uid)

    def write_files(self, files: dict[str, str | bytes] | None) -> None:
        """Write ``files`` (relative path -> text or bytes) into the workspace, parents created.

        Raises:
            ConfigError: a path is absolute or escapes the workspace.
            SandboxError: a parent in the workspace is a symlink (refuses to follow it).
        """
        for rel, content in (files or {}).items():
            rel = _safe_rel(rel)
            data = content.encode() if isinstance(content, str) else bytes(content)
            parts = rel.split("/")
            cur = self.path
            for part in parts[:-1]:
                cur = os.path.join(cur, part)
                if os.path.islink(cur):
                    raise SandboxError(f"workspace path {rel!r} goes through a symlink")
                if not os.path.isdir(cur):
                    os.mkdir(cur, 0o755)
                    self._chown(cur)
            target = os.path.join(self.path, rel)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, data) if data else None
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
            finally:
                os.close(fd)

    def read_file(self, rel: str, max_bytes: int = 64 << 20) -> bytes:
        """Read one workspace file without following symlinks anywhere on its path.

        Raises:
            FileNotFoundError: missing; SandboxError: a symlink, not a regular file, or too big.
        """
        rel = _safe_rel(rel)
        cur = self.path
        for part in rel.split("/"):
            cur = os.path.join(cur, part)
            if os.path.islink(cur):
                raise SandboxError(f"refusing to read {rel!r}: it is (or goes through) a symlink")
        fd = os.open(cur, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not os.path.stat.S_ISREG(st.st_mode):
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
        """Copy the whole tree to ``dest`` (symlinks copied as links, never followed)."""
        shutil.copytree(self.path, dest, symlinks=True)

    def restore_from(self, src: str) -> None:
        """Replace the workspace contents by the tree at ``src`` (ownership set to ``uid``)."""
        for name in os.listdir(self.path):
            p = os.path.join(self.path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        shutil.copytree(src, self.path, symlinks=True, dirs_exist_ok=True)
        if self.uid is not None:
            for root, dirs, files in os.walk(self.path):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), self.uid, self.uid)

    def remove(self) -> None:
        """Delete the workspace (best effort; the sandbox may have made dirs read-only)."""
        def onerror(func, path, exc):  # noqa: ARG001
            try:
                os.chmod(os.path.dirname(path), 0o700)
                func(path)
            except OSError:
                pass

        shutil.rmtree(self.path, onerror=onerror)
