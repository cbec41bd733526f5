"""_pypi: the three endpoints in turn, file-name parsing, versions, times, every failure kind."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.index import _pypi
from tests.unit.plugins.lookup_fakes import Reply, install

BASE = "http://index.test/root"
RELEASE = BASE + "/pypi/vllm/0.11.0/json"
PROJECT = BASE + "/pypi/vllm/json"
SIMPLE = BASE + "/simple/vllm/"

SHA = {"whl": "a" * 64, "arm": "b" * 64, "sdist": "c" * 64, "old": "d" * 64}


def json_file(filename, sha, when, packagetype="bdist_wheel", yanked=False, reason=None, url=None):
    return {
        "filename": filename,
        "url": url or "https://files.test/packages/%s" % filename,
        "packagetype": packagetype,
        "size": 1000 + len(filename),
        "upload_time": when.replace("Z", ""),
        "upload_time_iso_8601": when,
        "digests": {"sha256": sha, "md5": "0" * 32},
        "yanked": yanked,
        "yanked_reason": reason,
    }


FILES_0110 = [
    json_file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", SHA["whl"], "2025-10-02T20:00:00.000000Z"),
    json_file("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", SHA["arm"], "2025-10-02T20:05:00.123456Z"),
    json_file("vllm-0.11.0.tar.gz", SHA["sdist"], "2025-10-02T20:10:00Z", packagetype="sdist"),
]


def release_json(files=None, yanked=False, reason=None):
    return {"info": {"name": "vllm", "version": "0.11.0", "yanked": yanked, "yanked_reason": reason},
            "urls": FILES_0110 if files is None else files}


def project_json(releases=None):
    if releases is None:
        releases = {
            "0.10.2": [json_file("vllm-0.10.2.tar.gz", SHA["old"], "2025-09-01T00:00:00Z", "sdist")],
            "0.11.0": FILES_0110,
            "0.11.1rc1": [],
            "0.11.2": [],
            "0.12.0": [],
            "0.9.0": [],
            "0.20.0": [],
        }
    return {"info": {"name": "vllm", "version": "0.20.0"}, "releases": releases, "urls": []}


def simple_file(filename, sha, when, yanked=False, url=None):
    entry = {"filename": filename, "url": url or "../../files/%s" % filename, "hashes": {"sha256": sha},
             "requires-python": ">=3.9", "size": 2000 + len(filename), "yanked": yanked}
    if when is not None:
        entry["upload-time"] = when
    return entry


def simple_json(files=None, versions=("0.10.2", "0.11.0", "0.20.0")):
    if files is None:
        files = [
            simple_file("vllm-0.10.2.tar.gz", SHA["old"], "2025-09-01T00:00:00Z"),
            simple_file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", SHA["whl"], "2025-10-02T20:00:00Z"),
            simple_file("vllm-0.11.0.tar.gz", SHA["sdist"], "2025-10-02T20:10:00.5Z"),
            simple_file("vllm-0.11.0.post1.tar.gz", SHA["old"], "2025-12-01T00:00:00Z"),
            simple_file("vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", SHA["old"], "2026-06-10T12:00:00Z"),
        ]
    data = {"meta": {"api-version": "1.1"}, "name": "vllm", "files": files}
    if versions is not None:
        data["versions"] = list(versions)
    return data


SIMPLE_TYPE = "application/vnd.pypi.simple.v1+json"


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def run(project="vllm", version="0.11.0", margin=24, simple_url=None, retries=2, index_url=BASE):
    client = _http.HttpClient(retries=retries, backoff=0.25)
    return _pypi.lookup(client, project, version, index_url=index_url, simple_url=simple_url,
                        margin_hours=margin)


# -- the three endpoints ---------------------------------------------------------------------------
def test_release_json_answers_first(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release_json()))
    result = run()
    assert result["source"] == "release_json"
    assert result["source_url"] == RELEASE
    # the first upload dates the release; the others came within the margin
    assert result["published"] == "2025-10-02T20:00:00Z"
    assert result["last_upload"] == "2025-10-02T20:10:00Z"
    assert result["exclude_newer"] == "2025-10-03T20:00:00Z"
    assert result["late_files"] == []
    assert [f["filename"] for f in result["files"]] == [
        "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
        "vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl",
        "vllm-0.11.0.tar.gz",
    ]
    arm = result["files"][1]
    assert arm == {
        "filename": "vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl",
        "url": "https://files.test/packages/vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl",
        "sha256": SHA["arm"],
        "size": 1000 + len(arm["filename"]),
        "packagetype": "bdist_wheel",
        "upload_time": "2025-10-02T20:05:00.123456Z",
        "yanked": False,
    }
    assert result["yanked"] is False and result["yanked_reason"] is None
    assert server.count(PROJECT) == 0 and server.count(SIMPLE) == 0


def test_release_json_404_falls_back_to_project_json_and_resolves_relative_urls(fake):
    server, _sleeps = fake
    files = [dict(f, url="../../packages/ab/%s" % f["filename"]) for f in FILES_0110]
    server.add(PROJECT, Reply(200, project_json(dict(project_json()["releases"], **{"0.11.0": files}))))
    result = run()
    assert result["source"] == "project_json"
    assert server.count(RELEASE) == 1
    assert result["published"] == "2025-10-02T20:00:00Z"
    assert {f["sha256"] for f in result["files"]} == {SHA["whl"], SHA["arm"], SHA["sdist"]}
    assert result["files"][2]["url"] == BASE + "/packages/ab/vllm-0.11.0.tar.gz"


def test_release_json_for_another_version_is_not_trusted(fake):
    server, _sleeps = fake
    other = release_json()
    other["info"]["version"] = "0.20.0"
    server.add(RELEASE, Reply(200, other))
    server.add(PROJECT, Reply(200, project_json()))
    result = run()
    assert result["source"] == "project_json"
    assert result["published"] == "2025-10-02T20:00:00Z"


def test_both_json_apis_404_fall_back_to_simple_json_filtered_by_file_name(fake):
    server, _sleeps = fake
    server.add(SIMPLE, Reply(200, simple_json(), content_type=SIMPLE_TYPE))
    result = run()
    assert result["source"] == "simple_json"
    assert [c["url"] for c in server.calls] == [RELEASE, PROJECT, SIMPLE]
    assert server.calls[2]["headers"]["Accept"] == SIMPLE_TYPE
    # 0.10.2, 0.11.0.post1 and 0.20.0 are other versions: left out.
    assert [(f["filename"], f["packagetype"]) for f in result["files"]] == [
        ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "bdist_wheel"),
        ("vllm-0.11.0.tar.gz", "sdist"),
    ]
    assert result["published"] == "2025-10-02T20:00:00Z"
    assert result["last_upload"] == "2025-10-02T20:10:00.500000Z"
    assert result["exclude_newer"] == "2025-10-03T20:00:00Z"
    assert result["files"][1]["url"] == BASE + "/files/vllm-0.11.0.tar.gz"
    assert result["files"][1]["size"] == 2000 + len("vllm-0.11.0.tar.gz")


# -- a sha256 is 64 hex digits, nothing else ---------------------------------------------------------
NOT_SHA256 = [
    "md5:" + "a" * 64,  # another algorithm's name in front of 64 hex digits
    "sha256:" + "a" * 64,  # the JSON APIs list the bare hex
    "a" * 32,  # an md5
    "a" * 63,
    "g" * 64,
    "",
    None,
    64,
]


@pytest.mark.parametrize("value", NOT_SHA256)
def test_listed_sha256_refuses_what_is_not_64_hex_digits(value):
    assert _pypi.listed_sha256(value) is None


def test_listed_sha256_is_lower_case():
    assert _pypi.listed_sha256("AbC" + "0" * 61) == "abc" + "0" * 61


def test_release_json_digest_named_md5_is_no_sha256(fake):
    server, _sleeps = fake
    bad = [dict(FILES_0110[0], digests={"sha256": "md5:" + SHA["whl"]})] + FILES_0110[1:]
    server.add(RELEASE, Reply(200, release_json(bad)))
    result = run()
    assert [f["sha256"] for f in result["files"]] == [None, SHA["arm"], SHA["sdist"]]


def test_simple_json_digest_named_md5_is_no_sha256(fake):
    server, _sleeps = fake
    files = [simple_file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "md5:" + SHA["whl"], "2025-10-02T20:00:00Z"),
             simple_file("vllm-0.11.0.tar.gz", SHA["sdist"], "2025-10-02T20:10:00Z")]
    server.add(SIMPLE, Reply(200, simple_json(files), content_type=SIMPLE_TYPE))
    result = run()
    assert result["source"] == "simple_json"
    assert [f["sha256"] for f in result["files"]] == [None, SHA["sdist"]]


def test_simple_url_overrides_the_default_location(fake):
    server, _sleeps = fake
    server.add("http://other.test/+simple/vllm/", Reply(200, simple_json(), content_type=SIMPLE_TYPE))
    result = run(simple_url="http://other.test/+simple/")
    assert result["source_url"] == "http://other.test/+simple/vllm/"


def test_project_name_is_normalised_in_the_simple_url_and_file_names(fake):
    server, _sleeps = fake
    files = [simple_file("llmfleet_fakedep-1.0.0-py3-none-any.whl", SHA["whl"], "2025-01-15T10:00:00Z"),
             simple_file("llmfleet-fakedep-1.0.0.tar.gz", SHA["sdist"], "2025-01-15T10:00:00Z"),
             simple_file("llmfleet_fakedep-1.1.0-py3-none-any.whl", SHA["old"], "2025-09-01T10:00:00Z")]
    server.add(BASE + "/simple/llmfleet-fakedep/",
               Reply(200, simple_json(files, versions=None), content_type=SIMPLE_TYPE))
    result = run(project="LLMFleet_FakeDep", version="1.0.0")
    assert [f["filename"] for f in result["files"]] == [
        "llmfleet-fakedep-1.0.0.tar.gz", "llmfleet_fakedep-1.0.0-py3-none-any.whl"]
    assert result["published"] == "2025-01-15T10:00:00Z"


def test_default_index_is_the_one_constant(fake):
    server, _sleeps = fake
    url = _pypi.DEFAULT_INDEX_URL + "/pypi/vllm/0.11.0/json"
    server.add(url, Reply(200, release_json()))
    result = run(index_url=None)
    assert result["source_url"] == url


def test_trailing_slash_on_index_url_is_ignored(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release_json()))
    assert run(index_url=BASE + "/")["source_url"] == RELEASE


@pytest.mark.parametrize("margin, expected", [(0, "2025-10-02T20:00:00Z"), (48, "2025-10-04T20:00:00Z"),
                                              (1, "2025-10-02T21:00:00Z")])
def test_margin_moves_exclude_newer(fake, margin, expected):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release_json()))
    result = run(margin=margin)
    assert result["exclude_newer"] == expected
    # with no margin, the files uploaded 5 and 10 minutes after the first are late
    assert result["late_files"] == ([] if margin else [
        {"filename": "vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", "upload_time": "2025-10-02T20:05:00.123456Z",
         "exclude_newer": "2025-10-02T20:05:00.123456Z", "sha256": "b" * 64},
        {"filename": "vllm-0.11.0.tar.gz", "upload_time": "2025-10-02T20:10:00Z", "exclude_newer": "2025-10-02T20:10:00Z",
         "sha256": "c" * 64}])


def test_version_spelt_differently_is_found_in_project_json(fake):
    server, _sleeps = fake
    server.add(PROJECT, Reply(200, project_json()))
    result = run(version="v0.11.0")
    assert result["source"] == "project_json"
    assert len(result["files"]) == 3


# -- failures ------------------------------------------------------------------------------------
def test_no_such_project_lists_every_url_asked(fake):
    server, _sleeps = fake
    with pytest.raises(_pypi.ProjectNotFoundError) as exc:
        run(project="no-such-thing")
    msg = exc.value.msg
    for url in (BASE + "/pypi/no-such-thing/0.11.0/json", BASE + "/pypi/no-such-thing/json",
                BASE + "/simple/no-such-thing/"):
        assert url in msg
    assert "no project 'no-such-thing'" in msg
    assert len(exc.value.details["tried"]) == 3


def test_no_such_version_lists_the_nearest_and_the_most_recent(fake):
    server, _sleeps = fake
    server.add(PROJECT, Reply(200, project_json()))
    with pytest.raises(_pypi.VersionNotFoundError) as exc:
        run(version="0.11.5")
    err = exc.value
    assert err.details["nearest_versions"] == ["0.10.2", "0.11.0", "0.11.1rc1", "0.11.2", "0.12.0", "0.20.0"]
    assert err.details["latest_versions"] == ["0.20.0", "0.12.0", "0.11.2"]
    assert "no version 0.11.5" in err.msg
    assert "0.11.0, 0.11.1rc1, 0.11.2" in err.msg
    assert PROJECT in err.msg


def test_no_such_version_from_the_simple_index(fake):
    server, _sleeps = fake
    server.add(SIMPLE, Reply(200, simple_json(), content_type=SIMPLE_TYPE))
    with pytest.raises(_pypi.VersionNotFoundError) as exc:
        run(version="0.13.0")
    assert exc.value.details["nearest_versions"] == ["0.10.2", "0.11.0", "0.20.0"]
    assert exc.value.details["source"] == "simple_json"


def test_no_such_version_from_simple_file_names_when_versions_are_not_listed(fake):
    server, _sleeps = fake
    server.add(SIMPLE, Reply(200, simple_json(versions=None), content_type=SIMPLE_TYPE))
    with pytest.raises(_pypi.VersionNotFoundError) as exc:
        run(version="0.13.0")
    assert exc.value.details["nearest_versions"] == ["0.10.2", "0.11.0", "0.11.0.post1", "0.20.0"]


@pytest.mark.parametrize("where", ["release", "project", "simple"])
def test_a_release_without_files_fails(fake, where):
    server, _sleeps = fake
    if where == "release":
        server.add(RELEASE, Reply(200, release_json(files=[])))
    elif where == "project":
        server.add(PROJECT, Reply(200, project_json({"0.11.0": [], "0.10.0": []})))
    else:
        server.add(SIMPLE, Reply(200, simple_json(files=[], versions=["0.11.0"]), content_type=SIMPLE_TYPE))
    with pytest.raises(_pypi.NoFilesError) as exc:
        run()
    assert "lists no files" in exc.value.msg
    assert exc.value.details["source"] == where + "_json"


def test_simple_json_without_upload_times_cannot_date_the_release(fake):
    server, _sleeps = fake
    files = [simple_file("vllm-0.11.0.tar.gz", SHA["sdist"], None)]
    server.add(SIMPLE, Reply(200, simple_json(files), content_type=SIMPLE_TYPE))
    with pytest.raises(_pypi.NoUploadTimeError) as exc:
        run()
    assert "vllm-0.11.0.tar.gz" in exc.value.msg and "PEP 700" in exc.value.msg


def test_html_only_simple_index_is_explained(fake):
    server, _sleeps = fake
    server.add(SIMPLE, Reply(200, body=b"<html><a href='x'>vllm-0.11.0.tar.gz</a></html>",
                             content_type="text/html"))
    with pytest.raises(_pypi.UnexpectedAnswerError) as exc:
        run()
    assert "HTML only" in exc.value.msg and "PEP 691" in exc.value.msg


def test_invalid_json_fails_and_does_not_fall_back(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, body=b"{not json", content_type="application/json"))
    server.add(PROJECT, Reply(200, project_json()))
    with pytest.raises(_http.InvalidJsonError) as exc:
        run()
    assert RELEASE in exc.value.msg
    assert server.count(PROJECT) == 0


def test_json_of_the_wrong_shape_fails(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, {"hello": "world"}))
    with pytest.raises(_pypi.UnexpectedAnswerError) as exc:
        run()
    assert "'urls'" in exc.value.msg


def test_5xx_then_success(fake):
    server, sleeps = fake
    server.add(RELEASE, Reply(503), Reply(503), Reply(200, release_json()))
    assert run(retries=3)["published"] == "2025-10-02T20:00:00Z"
    assert server.count(RELEASE) == 3
    assert sleeps == [0.25, 0.5]


def test_unreachable_after_retries_does_not_fall_back(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(502))
    server.add(PROJECT, Reply(200, project_json()))
    with pytest.raises(_http.UnreachableError):
        run(retries=1)
    assert server.count(RELEASE) == 2 and server.count(PROJECT) == 0


# -- yanked ------------------------------------------------------------------------------------------
def test_yanked_release_from_release_json(fake):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release_json(yanked=True, reason="broken CUDA kernels")))
    result = run()
    assert result["yanked"] is True
    assert result["yanked_reason"] == "broken CUDA kernels"


def test_yanked_release_from_project_json_means_every_file_yanked(fake):
    server, _sleeps = fake
    yanked = [dict(f, yanked=True, yanked_reason="bad build") for f in FILES_0110]
    server.add(PROJECT, Reply(200, project_json({"0.11.0": yanked})))
    result = run()
    assert (result["yanked"], result["yanked_reason"]) == (True, "bad build")
    assert all(f["yanked"] for f in result["files"])


def test_one_yanked_file_does_not_yank_the_release(fake):
    server, _sleeps = fake
    files = [dict(FILES_0110[0], yanked=True, yanked_reason="bad wheel")] + FILES_0110[1:]
    server.add(PROJECT, Reply(200, project_json({"0.11.0": files})))
    result = run()
    assert result["yanked"] is False and result["yanked_reason"] is None
    assert [f["yanked"] for f in result["files"]] == [True, False, False]


def test_yanked_release_from_simple_json_with_a_reason_string(fake):
    server, _sleeps = fake
    files = [simple_file("vllm-0.11.0.tar.gz", SHA["sdist"], "2025-10-02T20:10:00Z", yanked="security")]
    server.add(SIMPLE, Reply(200, simple_json(files), content_type=SIMPLE_TYPE))
    result = run()
    assert (result["yanked"], result["yanked_reason"]) == (True, "security")


# -- pure helpers --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "filename, project, expected",
    [
        ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "vllm", ("0.11.0", "bdist_wheel")),
        ("vllm-0.11.0+cu129-cp38-abi3-manylinux1_x86_64.whl", "vllm", ("0.11.0+cu129", "bdist_wheel")),
        ("torch-2.8.0-1-cp311-cp311-manylinux_2_28_x86_64.whl", "torch", ("2.8.0", "bdist_wheel")),
        ("llmfleet_fakedep-1.0.0-py3-none-any.whl", "llmfleet-fakedep", ("1.0.0", "bdist_wheel")),
        ("llmfleet-fakedep-1.0.0.tar.gz", "llmfleet_fakedep", ("1.0.0", "sdist")),
        ("Foo.Bar-2.0rc1.zip", "foo-bar", ("2.0rc1", "sdist")),
        ("foo-1.0-py2.7.egg", "foo", ("1.0", "bdist_egg")),
        ("vllm-0.11.0.tar.gz", "vllm-flash", None),
        ("vllm_flash-1.0-py3-none-any.whl", "vllm", None),
        ("vllm-0.11.0.exe", "vllm", None),
        ("vllm-0.11.0-bad.whl", "vllm", None),
    ],
)
def test_parse_filename(filename, project, expected):
    assert _pypi.parse_filename(filename, project) == expected


@pytest.mark.parametrize(
    "text, canonical",
    [("0.11.0", "0.11.0"), ("v0.11.0", "0.11.0"), ("1.0RC1", "1.0rc1"), ("1.0-alpha.2", "1.0a2"),
     ("1.0.post", "1.0.post0"), ("1.0-1", "1.0.post1"), ("2!1.0.dev3", "2!1.0.dev3"),
     ("1.0+CU129", "1.0+cu129"), ("01.002", "1.2"), ("not a version", "not a version")],
)
def test_canonical_version(text, canonical):
    assert _pypi.canonical_version(text) == canonical


def test_version_order_follows_pep440():
    ordered = ["0.9.0", "0.10.0.dev1", "0.10.0a1", "0.10.0rc1", "0.10.0", "0.10.0.post1", "0.10.1", "1!0.1"]
    shuffled = ordered[::-1][3:] + ordered[::-1][:3]
    assert sorted(shuffled, key=_pypi.version_key) == ordered


def test_latest_versions_prefer_final_releases():
    assert _pypi.latest_versions(["1.0", "2.0rc1", "1.5", "0.1"]) == ["1.5", "1.0", "0.1"]
    assert _pypi.latest_versions(["2.0rc1", "2.0b1"]) == ["2.0rc1", "2.0b1"]
    assert _pypi.latest_versions([]) == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2025-10-04T01:39:57.798320Z", datetime.datetime(2025, 10, 4, 1, 39, 57, 798320, datetime.timezone.utc)),
        ("2025-10-04T01:39:57", datetime.datetime(2025, 10, 4, 1, 39, 57, tzinfo=datetime.timezone.utc)),
        ("2025-10-04T03:39:57+02:00", datetime.datetime(2025, 10, 4, 1, 39, 57, tzinfo=datetime.timezone.utc)),
        ("2025-10-03T20:39:57.5-0500", datetime.datetime(2025, 10, 4, 1, 39, 57, 500000, datetime.timezone.utc)),
        ("yesterday", None),
        (None, None),
    ],
)
def test_parse_time(text, expected):
    assert _pypi.parse_time(text) == expected


def test_format_time_is_rfc3339_utc():
    tz = datetime.timezone(datetime.timedelta(hours=2))
    assert _pypi.format_time(datetime.datetime(2025, 1, 1, 2, 0, 0, tzinfo=tz)) == "2025-01-01T00:00:00Z"
    assert _pypi.format_time(datetime.datetime(2025, 1, 1, 0, 0, 0, 1500, tzinfo=tz)) == "2024-12-31T22:00:00.001500Z"


def test_project_json_failure_other_than_404_does_not_fall_back_to_simple(fake):
    server, _sleeps = fake
    server.add(PROJECT, Reply(200, body=b"<html>proxy login</html>", content_type="text/html"))
    server.add(SIMPLE, Reply(200, simple_json(), content_type=SIMPLE_TYPE))
    with pytest.raises(_http.InvalidJsonError) as exc:
        run()
    assert PROJECT in exc.value.msg
    assert server.count(SIMPLE) == 0


# -- the machines of a wheel, for the engine's own late files (issue 30, finding 6) -------------
@pytest.mark.parametrize("filename, machines", [
    ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", {"x86_64"}),
    ("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", {"aarch64"}),
    ("uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", {"x86_64"}),
    ("vllm-0.11.0-1-cp38-abi3-manylinux_2_28_aarch64.whl", {"aarch64"}),
    ("llmfleet_fakedep-1.1.0-py3-none-any.whl", {"any"}),
    ("x-1.0-cp312-cp312-macosx_11_0_arm64.whl", {"arm64"}),
    ("vllm-0.11.0.tar.gz", set()),
    ("not-a-wheel.whl", set()),
])
def test_wheel_machines(filename, machines):
    assert _pypi.wheel_machines(filename) == machines


def _release(on_time, late):
    """pypi_published's answer: ``on_time`` [(filename, sha)], ``late`` [(filename, upload, cut-off, sha)]."""
    files = [{"filename": name, "sha256": sha} for name, sha in on_time]
    files += [{"filename": name, "sha256": sha} for name, _up, _cut, sha in late]
    return {"exclude_newer": "2025-06-11T12:00:00Z", "files": sorted(files, key=lambda f: f["filename"]),
            "late_files": [{"filename": name, "upload_time": up, "exclude_newer": cut, "sha256": sha}
                           for name, up, cut, sha in late]}


def test_an_on_time_wheel_that_fits_keeps_the_cut_off():
    # issue 44, finding 15: a universal wheel on time and a build-tagged wheel a year later
    found = _release([("eng-1.0-py3-none-any.whl", "a" * 64)],
                     [("eng-1.0-1-cp312-cp312-manylinux_2_28_x86_64.whl", "2026-06-10T12:00:00Z",
                       "2026-06-11T12:00:00Z", "b" * 64)])
    for machine in ("x86_64", "aarch64"):
        assert _pypi.own_late_file(found, machine) is None
        assert _pypi.own_exclude_newer(found, machine) is None


def test_only_a_late_file_fits_the_cut_off_is_lifted_to_it_alone():
    found = _release([("eng-1.0-cp38-abi3-manylinux_2_28_x86_64.whl", "a" * 64), ("eng-1.0.tar.gz", "c" * 64)],
                     [("eng-1.0-cp38-abi3-manylinux_2_28_aarch64.whl", "2026-09-01T12:00:00Z", "2026-09-02T12:00:00Z", "b" * 64),
                      ("eng-1.0-1-cp38-abi3-manylinux_2_31_aarch64.whl", "2026-09-03T12:00:00.5Z",
                       "2026-09-04T12:00:00.500000Z", "d" * 64),
                      ("eng-1.0-py3-none-any.whl", "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "e" * 64)])
    # the earliest late wheel of the machine: the later ones (a rebuild, a pure wheel) stay out
    assert _pypi.own_late_file(found, "aarch64") == {
        "filename": "eng-1.0-cp38-abi3-manylinux_2_28_aarch64.whl", "upload_time": "2026-09-01T12:00:00Z",
        "exclude_newer": "2026-09-02T12:00:00Z", "sha256": "b" * 64}
    assert _pypi.own_exclude_newer(found, "aarch64") == "2026-09-02T12:00:00Z"
    # the x86_64 wheel came in time; the sdist fits no node (nothing is built from source)
    assert _pypi.own_exclude_newer(found, "x86_64") is None
    warning = _pypi.late_file_warning("eng", "1.0", _pypi.own_late_file(found, "aarch64"), "aarch64")
    assert "eng-1.0-cp38-abi3-manylinux_2_28_aarch64.whl" in warning and "2026-09-02T12:00:00Z" in warning
    assert _pypi.own_exclude_newer({}, "x86_64") is None
