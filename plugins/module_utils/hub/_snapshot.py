# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

One model lock in one hub cache directory (``_cache`` has the layout), and the download that fills it.

``Snapshot.survey`` reads what is there (no writes); ``download`` fetches a missing blob (``_fetch``) to
``blobs/<name>.incomplete`` (resumed next time), checks its size and hash, and renames it into place;
``link_all`` links ``snapshots/<commit>/<path>`` and ``write_ref`` writes ``refs/<revision>``;
``prune_plan``/``prune`` remove older snapshots and the blobs only they used (``_cache.repo_prune``).
An ``.incomplete`` file is private (0600, made with ``O_EXCL|O_NOFOLLOW``) until its bytes are checked;
only then is it made 0644 and renamed. ``DownloadProgress`` is the progress file of the downloads.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import NotEnoughSpace
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import free_bytes, lstat_or_none, unlink_quiet, write_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.common._progress import ProgressFile, utc_now
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import (
    CHUNK_SIZE, DIR_MODE, FILE_MODE, LOCK_NAME, MIB, PARTIAL_MODE, Digest, InTheWay, IntegrityError, file_problem,
    link_target, repo_folder, repo_prune, repo_prune_plan)
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import blob_name


class FileSink(object):
    """``<blob>.incomplete``: what is there already is hashed first, then what arrives is appended
    and hashed. ``restart`` empties it (the server sent the whole file, not the rest)."""

    def __init__(self, path, entry):
        self.path = path
        self.digest = Digest(entry)
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            # a new one is ours alone from its first byte (0600 whatever the umask), never a link
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PARTIAL_MODE)
        except FileExistsError:
            fd = os.open(path, flags)  # an earlier run's, resumed (O_NOFOLLOW: not through a link)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InTheWay("%s is not a regular file: it is never written to" % path)
            os.fchmod(fd, PARTIAL_MODE)  # an earlier run's 0644 file is made private too
            self.handle = os.fdopen(fd, "r+b")
        except BaseException:
            os.close(fd)
            raise
        if st.st_size > entry["size"]:
            self.restart()  # longer than the file: not a beginning of it
        else:
            while True:
                data = self.handle.read(CHUNK_SIZE)
                if not data:
                    break
                self.digest.update(data)
        self.handle.seek(0, os.SEEK_END)

    @property
    def size(self):
        return self.digest.size

    def write(self, data):
        self.handle.write(data)
        self.digest.update(data)

    def restart(self):
        self.handle.seek(0)
        self.handle.truncate(0)
        self.digest.reset()

    def close(self):
        if self.handle is not None:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            self.handle = None


class Snapshot(object):
    """One lock in one hub cache directory."""

    def __init__(self, lock, cache_dir):
        self.lock = lock
        self.cache_dir = cache_dir
        self.repo = lock["repo"]
        self.commit = lock["commit"]
        self.revision = lock["revision"]
        self.repo_dir = os.path.join(cache_dir, repo_folder(self.repo))
        self.blobs_dir = os.path.join(self.repo_dir, "blobs")
        self.snapshots_dir = os.path.join(self.repo_dir, "snapshots")
        self.snapshot_dir = os.path.join(self.snapshots_dir, self.commit)
        self.refs_dir = os.path.join(self.repo_dir, "refs")
        self.ref_path = os.path.join(self.refs_dir, self.revision) if self.revision != self.commit else None
        self.lock_path = os.path.join(self.repo_dir, LOCK_NAME)
        self.files = lock["files"]

    # -- reading ---------------------------------------------------------------------------
    def blob_path(self, name):
        return os.path.join(self.blobs_dir, name)

    def link_path(self, path):
        return os.path.join(self.snapshot_dir, *path.split("/"))

    def _dir_in_the_way(self, path):
        """A component of ``path`` below the repo dir that exists and is not a real directory."""
        rel = os.path.relpath(path, self.repo_dir)
        current = self.repo_dir
        st = lstat_or_none(current)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            return current
        if rel == ".":
            return None
        for part in rel.split(os.sep):
            current = os.path.join(current, part)
            st = lstat_or_none(current)
            if st is None:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return current
        return None

    def survey(self, verify="size"):
        """What is there, read only: a dict with ``files`` (per file of the lock: ``path``,
        ``size``, ``blob``, ``blob_state`` ok|missing|wrong_size|wrong_hash, ``problem``,
        ``partial`` (bytes in its .incomplete), ``link_state`` ok|missing|wrong), ``ref_state``
        (ok|missing|wrong|none), ``in_the_way`` (paths this run would have to write over) and
        ``snapshots`` (the commits of the snapshots there)."""
        blobs = {}
        in_the_way = []
        for place in (self.blobs_dir, self.snapshot_dir, self.refs_dir):
            bad = self._dir_in_the_way(place)
            if bad and bad not in in_the_way:
                in_the_way.append(bad)
        out = []
        for entry in self.files:
            name = blob_name(entry)
            if name not in blobs:
                blobs[name] = self._blob_state(entry, verify, in_the_way)
            state, problem, partial = blobs[name]
            link = self.link_path(entry["path"])
            link_state = "missing"
            bad = self._dir_in_the_way(os.path.dirname(link))
            if bad:
                if bad not in in_the_way:
                    in_the_way.append(bad)
            else:
                st = lstat_or_none(link)
                if st is not None:
                    if stat.S_ISDIR(st.st_mode):
                        in_the_way.append(link)
                        link_state = "wrong"
                    elif stat.S_ISLNK(st.st_mode) and os.readlink(link) == link_target(entry["path"], name):
                        link_state = "ok"
                    else:
                        link_state = "wrong"
            out.append({"path": entry["path"], "size": entry["size"], "blob": name, "blob_state": state,
                        "problem": problem, "partial": partial, "link_state": link_state})
        ref_state = "none"
        if self.ref_path is not None:
            st = lstat_or_none(self.ref_path)
            if st is None:
                ref_state = "missing"
            elif stat.S_ISDIR(st.st_mode):
                ref_state = "wrong"
                in_the_way.append(self.ref_path)
            else:
                try:
                    with open(self.ref_path, encoding="utf-8") as handle:
                        ref_state = "ok" if handle.read() == self.commit else "wrong"
                except (OSError, ValueError):
                    ref_state = "wrong"
        snapshots = []
        if os.path.isdir(self.snapshots_dir):
            snapshots = sorted(name for name in os.listdir(self.snapshots_dir)
                               if os.path.isdir(os.path.join(self.snapshots_dir, name)))
        return {"files": out, "ref_state": ref_state, "in_the_way": in_the_way, "snapshots": snapshots}

    def _blob_state(self, entry, verify, in_the_way):
        name = blob_name(entry)
        path = self.blob_path(name)
        partial = 0
        st_partial = lstat_or_none(path + ".incomplete")
        if st_partial is not None:
            if stat.S_ISREG(st_partial.st_mode):
                partial = min(st_partial.st_size, entry["size"]) if st_partial.st_size <= entry["size"] else 0
            else:
                in_the_way.append(path + ".incomplete")
        try:
            st = os.stat(path)  # a blob may be a link into huggingface_hub's shared store
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(path):
                return "wrong_size", "a link to nothing", partial
            return "missing", None, partial
        if not stat.S_ISREG(st.st_mode):
            in_the_way.append(path)
            return "wrong_size", "not a regular file", partial
        if st.st_size != entry["size"]:
            return "wrong_size", "%d bytes, not the lock's %d" % (st.st_size, entry["size"]), partial
        if verify == "full":
            problem = file_problem(path, entry)
            if problem:
                return "wrong_hash", problem, partial
        return "ok", None, partial

    @staticmethod
    def work(survey):
        """What a survey leaves to do: blobs to download (one entry per blob: the first file that
        uses it), links to make, and whether the ref needs writing."""
        seen = set()
        fetch = []
        for item in survey["files"]:
            if item["blob_state"] != "ok" and item["blob"] not in seen:
                seen.add(item["blob"])
                fetch.append(item)
        links = [item for item in survey["files"] if item["link_state"] != "ok"]
        return {"fetch": fetch, "links": links, "ref": survey["ref_state"] in ("missing", "wrong")}

    def space_needed(self, fetch):
        """Bytes still to download for ``fetch`` (what the .incomplete files hold already counted)."""
        return sum(item["size"] - item["partial"] for item in fetch)

    def check_space(self, fetch, margin_mib):
        need = self.space_needed(fetch)
        if not fetch:
            return
        free, place = free_bytes(self.blobs_dir)
        margin = margin_mib * MIB
        if need + margin > free:
            raise NotEnoughSpace(
                "not enough free space for %s@%s in %s: %d files to download need %s (%d bytes) plus "
                "the margin of %d MiB (free_space_margin_mib), and the filesystem of %s has %s (%d bytes) "
                "free. Free some space, or choose another cache_dir."
                % (self.repo, self.commit, self.cache_dir, len(fetch), _mib(need), need, margin_mib, place,
                   _mib(free), free),
                needed_bytes=need, free_bytes=free, margin_mib=margin_mib)

    # -- writing ---------------------------------------------------------------------------
    def _mkdirs(self, path):
        """Make ``path`` and its missing parents up to the cache dir, 0755; refuse a non-directory
        (a link included) on the way below the repo dir."""
        bad = self._dir_in_the_way(path) if path.startswith(self.repo_dir) else None
        if bad:
            raise InTheWay("%s is in the way: the hub cache needs a directory there, and it is not "
                           "one (a link or a file); it is never removed. Move it away." % bad, path=bad)
        missing = []
        current = path
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for place in reversed(missing):
            try:
                os.mkdir(place, DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(place):
                    raise InTheWay("%s is in the way: it should be a directory" % place, path=place)
                continue
            os.chmod(place, DIR_MODE)  # whatever the umask: the service user reads the weights

    def prepare_repo(self):
        """The repo's directory (where the lock file goes)."""
        self._mkdirs(self.repo_dir)

    def prepare(self):
        self._mkdirs(self.blobs_dir)
        self._mkdirs(self.snapshots_dir)

    def download(self, item, entry, fetcher, url, progress=None, cancel=None):
        """Download the blob of ``item`` to ``<blob>.incomplete``, resuming, check it, rename it into
        place. Returns the bytes received. A file that is not the lock's is removed and refused."""
        # imported here: what downloads has the fetcher's module already; a look at a snapshot (the hourly run's,
        # engine_service_survey) downloads nothing and is spared its import
        # pylint: disable-next=import-outside-toplevel
        from ansible_collections.llmfleet.engines.plugins.module_utils.hub._fetch import Oversize

        blob = self.blob_path(item["blob"])
        partial = blob + ".incomplete"
        sink = FileSink(partial, entry)
        try:
            have = sink.size
            received = 0
            try:
                result = fetcher.fetch(url, sink, offset=have, limit=entry["size"], progress=progress,
                                       cancel=cancel)
                received += result.received
                if have and sink.digest.problem():
                    # the bytes kept from an earlier run may be what is wrong: once more, from the start
                    sink.restart()
                    result = fetcher.fetch(url, sink, offset=0, limit=entry["size"], progress=progress,
                                           cancel=cancel)
                    received += result.received
            except Oversize:
                sink.close()
                unlink_quiet(partial)
                raise IntegrityError(
                    "%s of %s@%s: %s sent more than the lock's %d bytes; removed what arrived. The "
                    "server holds another file than the lock's: check the endpoint (a mirror with "
                    "bad bytes?) and the lock." % (entry["path"], self.repo, self.commit, url, entry["size"]),
                    file=entry["path"], expected_size=entry["size"])
            sink.close()
            problem = sink.digest.problem()
            if problem:
                got_size = sink.digest.size
                got = sink.digest.hexdigest()
                unlink_quiet(partial)
                raise IntegrityError(
                    "%s of %s@%s from %s is not the lock's file: got %d bytes with %s %s, expected %d "
                    "bytes with %s %s. Removed it, nothing was linked under snapshots/. The server (or a "
                    "mirror on the way) serves other bytes than the lock pins: check the endpoint and "
                    "the lock." % (entry["path"], self.repo, self.commit, url, got_size, sink.digest.kind,
                                   got, entry["size"], sink.digest.kind, sink.digest.expected),
                    file=entry["path"], expected_size=entry["size"], got_size=got_size,
                    expected_hash=sink.digest.expected, got_hash=got)
            os.chmod(partial, FILE_MODE)
            os.replace(partial, blob)
            return received
        finally:
            if sink.handle is not None:
                sink.handle.close()

    def _link(self, item):
        link = self.link_path(item["path"])
        self._mkdirs(os.path.dirname(link))
        target = link_target(item["path"], item["blob"])
        st = lstat_or_none(link)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise InTheWay("%s is a directory where the snapshot's file %s must be linked; it is never "
                           "removed. Move it away." % (link, item["path"]), path=link)
        tmp = "%s.llmfleet-tmp.%d" % (link, os.getpid())
        unlink_quiet(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)

    def link_all(self, items):
        for item in items:
            self._link(item)

    def write_ref(self):
        self._mkdirs(os.path.dirname(self.ref_path))
        write_atomic(self.ref_path, self.commit.encode("utf-8"), FILE_MODE)

    # -- pruning ---------------------------------------------------------------------------
    def prune_plan(self, keep, in_use=()):
        """What pruning removes, read only: ``snapshots`` (commits, beyond the ``keep`` newest by
        mtime, the lock's commit counting as one; ``in_use`` are kept on top), ``blobs`` (names no
        kept snapshot links to and the lock does not use), ``partials`` (.incomplete files of such
        blobs: a download this lock no longer needs, left by a run that failed), ``refs`` (names
        pointing at a commit that is not kept) and ``unknown`` (entries left alone)."""
        keep_set = set([self.commit]) | set(in_use or ())
        return repo_prune_plan(self.repo_dir, keep_set, max(0, keep - 1),
                               set(blob_name(entry) for entry in self.files))

    def prune(self, plan):
        """Remove what ``plan`` names (``repo_prune``)."""
        repo_prune(self.repo_dir, plan)


class DownloadProgress(ProgressFile):
    """The progress file of a lock's downloads (model_snapshot's ``progress_file``), rewritten about
    once a second::

        {"file", "bytes_done", "bytes_total", "rate_bps", "started", "files_done", "files_total", "files"}

    ``bytes_done`` sums what every worker received; ``files`` are those in flight, ``file`` the last
    one that moved. Workers call ``file_bytes``/``file_finished`` from their threads."""

    def __init__(self, path, bytes_total, files_total, interval=1.0):
        super().__init__(path, {"file": None, "bytes_done": 0, "bytes_total": bytes_total, "rate_bps": 0,
                                "started": utc_now(), "files_done": 0, "files_total": files_total,
                                "files": []}, interval)
        self._done = {}  # file -> bytes of it received by this run (every worker's, summed)
        self._active = []

    def file_started(self, name):
        with self._guard:
            self._done.setdefault(name, 0)
            if name not in self._active:
                self._active.append(name)
            self._write(True, file=name, files=list(self._active))

    def file_bytes(self, name, count):
        """A worker's file ``name`` has ``count`` bytes of this run: the line sums every worker's."""
        with self._guard:
            self._done[name] = count
            if name not in self._active:
                self._active.append(name)
            self._write(False, file=name, bytes_done=sum(self._done.values()), files=list(self._active))

    def file_finished(self, name):
        with self._guard:
            if name in self._active:
                self._active.remove(name)
            self._write(True, files_done=self.data["files_done"] + 1, files=list(self._active))

    def _refresh(self, elapsed):
        self.data["rate_bps"] = int(self.data["bytes_done"] / elapsed) if elapsed > 0 else 0


def _mib(count):
    return "%.1f MiB" % (count / float(MIB))
