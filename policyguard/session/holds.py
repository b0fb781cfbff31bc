"""How a store holds one session's decision lock: per key in this process, and per key across processes.

:class:`LocalHolds` is a table of per-key thread locks that keeps only the keys
held or waited for (so it never grows with the number of sessions seen). The
memory store uses it alone; a private SQLite memory database too.

:class:`FileHolds` adds the other processes: a POSIX byte-range lock
(``fcntl.lockf``) on a sidecar file, one byte per key, at an offset hashed
from the key. The kernel drops such a lock when its process dies, so a killed
holder leaves nothing to wait out. Two sessions whose hashes meet (62 bits:
about one pair in 10^9 among 100,000 sessions held at once) only wait for
each other; neither is ever let in twice.

POSIX record locks belong to the *process*, not to the descriptor, and closing
*any* descriptor of the file drops *all* of the process's locks on it. So each
process keeps one descriptor per lock file, shared by every store opened on it
(found by device and inode, without opening the file again), closed only when
the last store and the last hold are gone; and threads are kept apart by a
:class:`LocalHolds` keyed by the byte offset (two sessions sharing a byte share
a thread lock too, or the release of one would free the other).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_OFFSETS = 1 << 62  # byte offsets a key hashes to (off_t is 64 bits: the range ends well before the maximum)
_POLL_S = (0.0002, 0.002)  # the first and the longest pause between two tries of a file lock (500 tries/s)


def wait_s(timeout: float) -> float:
    """``timeout`` as a usable wait: 0 for a negative or NaN one, at most a day."""
    return min(timeout, 86_400.0) if timeout > 0 else 0.0


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # threads holding or waiting for the lock


class LocalHolds(Generic[K]):
    """Exclusive holds per key among this process's threads; not re-entrant (a second hold by the holder waits)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._entries: dict[K, _Entry] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for now (the table's whole size)."""
        with self._mutex:
            return len(self._entries)

    def acquire(self, key: K, timeout: float) -> bool:
        """Take ``key`` within ``timeout`` seconds (0: try once); False when it stayed taken."""
        with self._mutex:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.users += 1
        wait = wait_s(timeout)
        got = entry.lock.acquire(timeout=wait) if wait > 0 else entry.lock.acquire(blocking=False)
        if not got:
            self._leave(key, entry)
        return got

    def release(self, key: K) -> None:
        """Give back ``key`` (taken by :meth:`acquire`)."""
        with self._mutex:
            entry = self._entries[key]
        entry.lock.release()
        self._leave(key, entry)

    def _leave(self, key: K, entry: _Entry) -> None:
        with self._mutex:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]


def offset(key: str) -> int:
    """The byte of the lock file that stands for ``key``."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _OFFSETS


class FileHolds:
    """Exclusive holds per key among processes (and threads) that lock the same file.

    Get one with :meth:`open`, give it back with :meth:`close`. OS errors are
    raised as :class:`OSError`; the store turns them into its own error.
    """

    _mutex = threading.Lock()
    _open: dict[tuple[int, int], FileHolds] = {}

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self._fd = fd
        self._identity = identity
        self._pid = os.getpid()
        self._refs = 0  # stores that opened it + holds not yet released
        self.local: LocalHolds[int] = LocalHolds()

    @classmethod
    def open(cls, path: str) -> FileHolds:
        """This process's lock file at ``path`` (created if need be), shared with every other opener."""
        with cls._mutex:
            try:
                st = os.stat(path)
                shared = cls._open.get((st.st_dev, st.st_ino))
            except FileNotFoundError:
                shared = None
            if shared is None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
                st = os.fstat(fd)
                shared = cls._open[(st.st_dev, st.st_ino)] = cls(fd, (st.st_dev, st.st_ino))
            shared._refs += 1
            return shared

    def close(self) -> None:
        """Give back one :meth:`open`; the last one (with no hold left) closes the descriptor."""
        self._unref()

    def acquire(self, key: str, timeout: float) -> int | None:
        """Take ``key`` within ``timeout`` seconds (0: try once): its offset, to :meth:`release`; None when taken."""
        if os.getpid() != self._pid:
            raise OSError(errno.EBADF, "a lock file cannot be used across fork: open the store in this process")
        deadline = time.monotonic() + wait_s(timeout)
        byte = offset(key)
        with self._mutex:
            if self._refs <= 0:  # closed by its last store: the descriptor may be another file's by now
                raise OSError(errno.EBADF, "the store's lock file is closed")
            self._refs += 1  # the descriptor stays open until this hold is released
        taken = False
        try:
            if self.local.acquire(byte, timeout):
                try:
                    taken = self._lock_byte(byte, deadline)
                finally:
                    if not taken:
                        self.local.release(byte)
        finally:
            if not taken:
                self._unref()
        return byte if taken else None

    def release(self, byte: int) -> None:
        """Give back a hold taken by :meth:`acquire`; never raises."""
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, byte)
        except OSError:
            pass  # the descriptor is still open, so this does not happen; the next holder's release unlocks it
        finally:
            self.local.release(byte)
            self._unref()

    def _lock_byte(self, byte: int, deadline: float) -> bool:
        pause = _POLL_S[0]
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, byte)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_S[1])

    def _unref(self) -> None:
        with self._mutex:
            self._refs -= 1
            if self._refs > 0:
                return
            if self._open.get(self._identity) is self:
                del self._open[self._identity]
            if os.getpid() == self._pid:  # a forked child's copy: the parent's descriptor, not ours to close
                os.close(self._fd)


def _after_fork_in_child() -> None:
    FileHolds._mutex = threading.Lock()
    FileHolds._open = {}


os.register_at_fork(after_in_child=_after_fork_in_child)
