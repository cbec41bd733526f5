# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

A node's rollout lock (the ``rollout_lock`` module): one run rolls out on a node at a time. The lock
is a directory (``mkdir`` is atomic) that outlives the module call that takes it: the run holds it
across many tasks and removes it at the end. Its ``holder`` file says who holds it, for the message
of a run that waits in vain.

A lock older than ``stale`` seconds (its holder file's age, or the directory's own where a run died
between making it and writing the holder) was left by a run that died: it is taken over. Two runs
that both find it stale must not both take it over (the second would remove the lock the first has
just made), so the take-over happens under a second lock (``<lock>.takeover``, made the same way),
and the age is read again under it. A take-over lock older than ``stale`` was itself left by a run
that died while taking over, and is dropped first.

The lock is the run's, not the path's: a run takes it with a token (random, the module's result)
written in the holder file under the text, keeps it fresh (``refresh``: the holder's time set to
now, a heartbeat between the run's long steps) and gives it back with ``release``, which removes
only a lock whose token is the run's. A run whose lock was taken over while it ran (it waited on
something longer than ``stale``) neither refreshes nor removes the new holder's lock. Refresh and
release happen under the take-over lock, so a take-over never falls between their read of the
token and their change.

Nothing here follows a link: a lock path, holder or take-over lock that is a symbolic link, or not
what it should be, fails the call (the lock lives in root's directory beside ``current``).
"""

from __future__ import annotations

import binascii
import errno
import os
import stat
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

HOLDER = "holder"
TAKEOVER = ".takeover"
TOKEN = "token: "
# how long refresh and release wait for a take-over lock another run holds (it holds it for a
# rename and an rmdir): longer means one was left by a run that died while taking over
TAKEOVER_WAIT = 30


class LockHeld(LlmfleetError):
    """Another run holds the rollout lock and did not give it back within ``wait`` seconds.
    ``details``: ``busy`` (true), ``holder`` (its text, '' when unknown), ``waited`` (seconds)."""


class LockError(LlmfleetError):
    """The lock's path is not what a lock can be (a link, a file), or the filesystem refused."""


class LockLost(LlmfleetError):
    """The run's lock is gone or another run's now (taken over as stale while this run held it).
    ``details``: ``lost`` (true), ``holder`` (the holder's text now, '' when none)."""


def new_token():
    """A token for one run's hold of the lock."""
    return binascii.hexlify(os.urandom(16)).decode("ascii")


def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _directory(path, what):
    """The lstat of ``path`` when it is a directory, None when missing; a link or another type fails."""
    st = _lstat(path)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise LockError("%s %s is %s: refused (remove it if no run is active)" % (what, path, kind), path=path)
    return st


def age(path, now):
    """Seconds since the lock at ``path`` was last touched: its holder file's age, else the directory's;
    None when there is no lock."""
    for candidate in (os.path.join(path, HOLDER), path):
        st = _lstat(candidate)
        if st is not None:
            return max(now - st.st_mtime, 0.0)
    return None


def _open_holder(path, flags=os.O_RDONLY):
    """A descriptor of the lock's holder file, None when there is none or it is not a plain file."""
    try:
        fd = os.open(os.path.join(path, HOLDER), flags | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _read_holder(fd):
    """``(text, token)`` of an open holder file: its lines but the token's, and the token ('' when none)."""
    lines = os.read(fd, 4096).decode("utf-8", "replace").splitlines()
    tokens = [line[len(TOKEN):].strip() for line in lines if line.startswith(TOKEN)]
    text = "\n".join(line for line in lines if not line.startswith(TOKEN)).strip()
    return text, (tokens[0] if tokens else "")


def holder(path):
    """The holder's text ('' when there is none, or it cannot be read as a plain file); never its token."""
    fd = _open_holder(path)
    if fd is None:
        return ""
    try:
        return _read_holder(fd)[0]
    finally:
        os.close(fd)


def _remove(path):
    """Remove a lock directory: its holder file, then the directory (nothing else is ever in it; what
    another thing put there stays, and the rmdir fails)."""
    name = os.path.join(path, HOLDER)
    st = _lstat(name)
    if st is not None:
        os.unlink(name)
    os.rmdir(path)


def _take_over(path, stale, now):
    """Remove a stale lock under the take-over lock; its age when this call removed it, else None."""
    takeover = path + TAKEOVER
    left = _directory(takeover, "the take-over lock")
    if left is not None and now() - left.st_mtime > stale:
        try:
            os.rmdir(takeover)
        except OSError:
            pass
    try:
        os.mkdir(takeover, 0o700)
    except FileExistsError:
        return None  # another run is taking it over
    try:
        _directory(path, "the rollout lock")
        found = age(path, now())
        if found is None or found <= stale:
            return None
        _remove(path)
        return found
    finally:
        os.rmdir(takeover)


def acquire(path, text, wait, stale, now=time.time, sleep=time.sleep, poll=5.0, token=None):
    """Take the rollout lock at ``path`` and write ``text`` (and ``token``, when given: what ``refresh``
    and ``release`` ask for) as its holder, waiting up to ``wait`` seconds for another run to give it
    back. Returns the age of a stale lock this call took over, or None. Raises ``LockHeld`` when the
    lock is still held after ``wait`` seconds."""
    started = now()
    taken_over = None
    while True:
        _directory(path, "the rollout lock")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            found = age(path, now())
            if found is not None and found > stale:
                removed = _take_over(path, stale, now)
                if removed is not None:
                    taken_over = removed
                    continue
                # another run took it over first: wait for that one as for any holder
            waited = now() - started
            if waited >= wait:
                raise LockHeld("another run is rolling out on this node (%s); waited %d s for %s"
                               % (holder(path) or "holder unknown", int(waited), path),
                               busy=True, holder=holder(path), waited=int(waited))
            sleep(min(poll, max(wait - waited, 0.1)))
            continue
        except OSError as exc:
            raise LockError("cannot make the rollout lock %s: %s" % (path, os.strerror(exc.errno or errno.EIO)),
                            path=path)
        fd = os.open(os.path.join(path, HOLDER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            body = text.rstrip("\n") + "\n" + ("%s%s\n" % (TOKEN, token) if token else "")
            os.write(fd, body.encode("utf-8"))
        finally:
            os.close(fd)
        return taken_over


def _under_takeover(path, work, now=time.time, sleep=time.sleep, wait=TAKEOVER_WAIT):
    """``work()`` under the take-over lock: no take-over removes the lock while it runs."""
    takeover = path + TAKEOVER
    started = now()
    while True:
        _directory(takeover, "the take-over lock")
        try:
            os.mkdir(takeover, 0o700)
            break
        except FileExistsError:
            if now() - started >= wait:
                raise LockError("the take-over lock %s has been held for %d s (a run that died while taking over"
                                " the rollout lock?): remove it if no run is active" % (takeover, wait), path=takeover)
            sleep(0.2)
    try:
        return work()
    finally:
        os.rmdir(takeover)


def _holder_fd_of(path, token):
    """The holder's descriptor when the lock at ``path`` is the run's with ``token``; else ``LockLost``."""
    _directory(path, "the rollout lock")
    fd = _open_holder(path)
    found_text, found = ("", "") if fd is None else _read_holder(fd)
    if fd is not None and token and found == token:
        return fd
    if fd is not None:
        os.close(fd)
    now = ("held by another run now (%s)" % (found_text or "holder unknown")) if os.path.lexists(path) else "gone"
    raise LockLost("this run's rollout lock %s is %s: it was taken over while this run held it" % (path, now),
                   lost=True, holder=found_text)


def refresh(path, token, now=time.time, sleep=time.sleep):
    """The heartbeat: the holder's time set to now, when the lock is still the run's (``LockLost``
    when it is not: the run must stop changing the node)."""
    def beat():
        fd = _holder_fd_of(path, token)
        try:
            at = now()
            os.utime(fd, (at, at))
        finally:
            os.close(fd)
    _under_takeover(path, beat, now=now, sleep=sleep)


def release(path, token, now=time.time, sleep=time.sleep):
    """Give the run's lock back: removed only when its token is ``token``. Returns ``(state, holder)``:
    ``("released", None)``, ``("gone", None)`` when there was no lock to give back, or ``("held", text)``
    when another run holds it now (it is left to that run)."""
    def give_back():
        if not os.path.lexists(path):
            return "gone", None
        try:
            os.close(_holder_fd_of(path, token))
        except LockLost as exc:
            return "held", exc.details["holder"] or "holder unknown"
        _remove(path)
        return "released", None
    return _under_takeover(path, give_back, now=now, sleep=sleep)
