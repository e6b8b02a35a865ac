"""Collecting LMS downloads (``course_tools.classroom.collect``).

Each download is its student's, whatever it holds: the unit tests craft
hostile downloads (another student's name inside a zip, corrupt zips, a
zip bomb, too many members, paths out of the archive, links, devices,
nested archives, duplicates, names the regex does not match) and check
that each becomes a reason of its sender (or a report line) and that
nothing is written outside ``submitted/<student>/<assignment>/``. The
end-to-end test grades a class collected from such a folder.
"""

import os
import shutil
import stat
import struct
import time
import zipfile
import zlib

import nbformat
import pytest

from course_tools import release
from course_tools.classroom import archive as Z
from course_tools.classroom import collect as K
from course_tools.classroom.course import (
    hash_folder,
    load_course,
    submissions,
)
from course_tools.classroom.grade import Options, grade_class, summary
from tests.nbgrading import ROOT
from tests.test_classroom import (
    ASSIGNMENT,
    NAME,
    RIGHT,
    WRONG,
    _answer,
    _tiny_source,
)

A = ASSIGNMENT
MB = 2**20
OLD, NEW = 1_700_000_000, 1_700_100_000  # the LMS's modification times


@pytest.fixture
def course(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", root)
    return load_course(root)


def _download(tmp_path, name, data, mtime=OLD):
    """``downloads/00_tiny/archive/<name>`` holding ``data`` (bytes, or
    ``[(member name or ZipInfo, bytes)]`` for a zip)."""
    path = tmp_path / "downloads" / A / "archive" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, content in data:
                archive.writestr(member, content)
    os.utime(path, (mtime, mtime))
    return path


def _collect(course, tmp_path, **kwargs):
    return K.collect(course, [A], tmp_path / "downloads", **kwargs)


def _files(course):
    """Every file of the course but its configuration and the grader's
    own (the manifest, each folder's submission time: test_term),
    relative."""
    return {str(p.relative_to(course.root)): p.read_bytes()
            for p in sorted(course.root.rglob("*"))
            if p.is_file() and p.name not in ("nbgrader_config.py",
                                              K.MANIFEST, "timestamp.txt")}


def _member(name, mode):
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    return info


def _zeros_zip(path, mib, mtime=OLD):
    """A zip of one member, ``tiny.ipynb``, of ``mib`` MiB of zeros,
    written from one compressed MiB repeated (a full flush makes every
    MiB compress to the same bytes), so a 1 GiB bomb takes 1 MB and a
    fraction of a second."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = (squeeze.compress(bytes(MB))
             + squeeze.flush(zlib.Z_FULL_FLUSH))
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(bytes(MB), crc)
    data = block * mib + squeeze.flush()
    name = b"tiny.ipynb"
    fields = struct.pack("<HHHHHIII", 20, 0, 8, 0, 33, crc, len(data),
                         mib * MB)
    local = b"PK\x03\x04" + fields + struct.pack("<HH", len(name), 0)
    central = (b"PK\x01\x02" + struct.pack("<H", 20) + fields
               + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, 0)
               + name)
    offset = len(local) + len(name) + len(data)
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 1, 1,
                                      len(central), offset, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(local + name + data + central + end)
    os.utime(path, (mtime, mtime))
    return path


def test_each_download_goes_to_the_student_it_names(course, tmp_path):
    _download(tmp_path, f"alice_{NAME}.ipynb", b"alice's notebook")
    _download(tmp_path, "bob_work.zip", [
        ("work/tiny.ipynb", b"bob's notebook"),
        ("work/data.csv", b"1,2"),
        ("__MACOSX/work/._tiny.ipynb", b"resource fork"),
        ("work/.ipynb_checkpoints/tiny-checkpoint.ipynb", b"old"),
        ("work/", b"")])
    report = _collect(course, tmp_path)
    assert _files(course) == {
        f"submitted/alice/{A}/tiny.ipynb": b"alice's notebook",
        f"submitted/bob/{A}/tiny.ipynb": b"bob's notebook",
        f"submitted/bob/{A}/data.csv": b"1,2"}
    assert report.reasons == {} and report.lines == []


def test_a_zip_naming_another_student_stays_its_senders(course, tmp_path):
    _download(tmp_path, f"alice_{NAME}.ipynb", b"alice's notebook")
    _download(tmp_path, "mallory_tiny.zip", [
        (f"submitted/alice/{A}/tiny.ipynb", b"mallory's, for alice"),
        ("alice_tiny.ipynb", b"mallory's, named for alice"),
        (f"../alice/{A}/notes.txt", b"up and out"),
        (f"/{course.root}/submitted/carol/{A}/tiny.ipynb", b"absolute"),
        (f"C:\\carol\\{A}\\tiny.ipynb", b"a drive")])
    report = _collect(course, tmp_path)
    assert _files(course) == {
        f"submitted/alice/{A}/tiny.ipynb": b"alice's notebook",
        f"submitted/mallory/{A}/tiny.ipynb": b"mallory's, for alice",
        f"submitted/mallory/{A}/alice_tiny.ipynb":
            b"mallory's, named for alice"}
    assert set(report.reasons) == {(A, "mallory")}
    text = "; ".join(report.reasons[(A, "mallory")])
    assert "notes.txt skipped: a path that leads out of the archive" in text
    assert text.count("skipped: an absolute path") == 2, text


@pytest.mark.parametrize("content, why", [
    (b"PK\x03\x04 not really a zip", "not a zip archive"),
    (b"", "not a zip archive"),
    ("truncated", "not a readable zip archive"),
    ("bad crc", "not a readable zip archive"),
])
def test_a_corrupt_zip_is_a_reason_of_its_sender(course, tmp_path,
                                                 content, why):
    if isinstance(content, str):
        path = _download(tmp_path, "carol_tiny.zip",
                         [("tiny.ipynb", os.urandom(100_000))])
        data = bytearray(path.read_bytes())
        if content == "truncated":
            data = data[:len(data) // 2] + data[-22:]
        else:
            data[200] ^= 0xFF  # inside the compressed bytes
        path.write_bytes(bytes(data))
        os.utime(path, (OLD, OLD))
    else:
        _download(tmp_path, "carol_tiny.zip", content)
    _download(tmp_path, f"alice_{NAME}.ipynb", b"alice's notebook")
    report = _collect(course, tmp_path)
    (reason,) = report.reasons[(A, "carol")]
    assert reason.startswith(f"{A}/archive/carol_tiny.zip was not "
                             f"collected: {why}"), reason
    assert (course.root / "submitted" / "carol" / A).is_dir()
    assert _files(course) == {
        f"submitted/alice/{A}/tiny.ipynb": b"alice's notebook"}


def test_a_zip_bomb_is_refused_without_unpacking_it(course, tmp_path):
    start = time.monotonic()
    bomb = _zeros_zip(tmp_path / "downloads" / A / "archive"
                      / "dave_tiny.zip", 1024)
    assert bomb.stat().st_size < 1.1 * MB
    with zipfile.ZipFile(bomb) as archive:  # a valid zip of 1 GiB
        (info,) = archive.infolist()
        assert info.file_size == 2**30
        with archive.open(info) as stream:
            assert stream.read(10) == bytes(10)
    report = _collect(course, tmp_path)
    (reason,) = report.reasons[(A, "dave")]
    assert "a zip bomb: tiny.ipynb would expand 1011 times" in reason
    assert _files(course) == {}
    assert time.monotonic() - start < 10


def test_a_zip_bomb_is_caught_while_unpacking_too(course, tmp_path,
                                                  monkeypatch):
    """Even if what the archive declares were believed, the bytes are
    counted as they come: unpacking stops past 1 MB at over 200:1."""
    monkeypatch.setattr(Z, "_declared", lambda info: None)
    _zeros_zip(tmp_path / "downloads" / A / "archive" / "dave_tiny.zip",
               1024)
    report = _collect(course, tmp_path)
    (reason,) = report.reasons[(A, "dave")]
    assert "a zip bomb: tiny.ipynb expands over 200 times" in reason
    assert _files(course) == {}


def test_sizes_are_counted_not_believed(course, tmp_path, monkeypatch):
    monkeypatch.setattr(Z, "MAX_MEMBER", MB)
    monkeypatch.setattr(Z, "MAX_TOTAL", 3 * MB)
    big = os.urandom(MB + 1)  # does not compress: no zip bomb
    _download(tmp_path, "erin_tiny.zip", [("tiny.ipynb", b"erin's"),
                                          ("data.bin", big)])
    _download(tmp_path, "frank_tiny.zip", [
        (f"part{i}.bin", os.urandom(MB)) for i in range(4)])
    # a member that says it holds 1000 bytes but holds 5 MB of zeros
    path = _download(tmp_path, "gina_tiny.zip",
                     [("tiny.ipynb", bytes(5 * MB))])
    data = bytearray(path.read_bytes())
    at = data.index(b"PK\x01\x02")
    data[at + 24:at + 28] = struct.pack("<I", 1000)
    path.write_bytes(bytes(data))
    report = _collect(course, tmp_path)
    assert _files(course) == {f"submitted/erin/{A}/tiny.ipynb": b"erin's"}
    assert "data.bin skipped: over the 1 MB limit for a file" in "; ".join(
        report.reasons[(A, "erin")])
    assert "over the 3 MB limit for an archive, unpacked" in \
        report.reasons[(A, "frank")][0]
    assert "not a readable zip archive" in report.reasons[(A, "gina")][0]


def test_an_oversized_download_is_refused(course, tmp_path, monkeypatch):
    monkeypatch.setattr(K, "MAX_DOWNLOAD", MB)
    _download(tmp_path, f"alice_{NAME}.ipynb", bytes(MB + 1))
    _download(tmp_path, "bob_tiny.zip", [("tiny.ipynb", os.urandom(MB))])
    report = _collect(course, tmp_path)
    for student in ("alice", "bob"):
        assert "1.0 MB, over the 1 MB limit for a download" in \
            report.reasons[(A, student)][0]
    assert _files(course) == {}


def test_too_many_members_are_refused(course, tmp_path):
    _download(tmp_path, "grace_tiny.zip",
              [(f"f{i}.txt", b"x") for i in range(Z.MAX_MEMBERS + 1)]
              + [("tiny.ipynb", b"grace's")])
    report = _collect(course, tmp_path)
    (reason,) = report.reasons[(A, "grace")]
    assert "1002 entries in the archive" in reason
    assert f"over the limit of {Z.MAX_MEMBERS} entries" in reason
    assert _files(course) == {}


def test_links_devices_and_nested_archives_are_skipped(course, tmp_path):
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("tiny.ipynb", b"nested")
    _download(tmp_path, "frank_tiny.zip", [
        ("tiny.ipynb", b"frank's notebook"),
        (_member("link.ipynb", stat.S_IFLNK | 0o777), b"/etc/passwd"),
        (_member("dev", stat.S_IFCHR | 0o666), b""),
        (_member("fifo", stat.S_IFIFO | 0o666), b""),
        ("inner.zip", inner.read_bytes()),
        ("inner.tar.gz", b"not unpacked either"),
        ("renamed.txt", inner.read_bytes()),
        ("copy/tiny.ipynb", b"a second tiny.ipynb"),
        ("bad\nname.txt", b"x"),
        ("work/timestamp.txt", b"2000-01-01 00:00:00")])
    report = _collect(course, tmp_path)
    assert _files(course) == {
        f"submitted/frank/{A}/tiny.ipynb": b"frank's notebook"}
    text = "\n".join(report.reasons[(A, "frank")])
    for expected in ("link.ipynb skipped: a symbolic link",
                     "dev skipped: not a regular file",
                     "fifo skipped: not a regular file",
                     "inner.zip skipped: an archive inside the archive",
                     "inner.tar.gz skipped: an archive inside",
                     "renamed.txt skipped: an archive inside",
                     "copy/tiny.ipynb skipped: the same file name as "
                     "tiny.ipynb",
                     "bad\\nname.txt skipped: a file name that cannot",
                     "work/timestamp.txt skipped: the grader's own file",
                     "only the other files of your archive"):
        assert expected in text, (expected, text)


def test_a_flood_of_skipped_members_is_counted_not_listed(course,
                                                          tmp_path):
    _download(tmp_path, "frank_tiny.zip", [("tiny.ipynb", b"frank's")]
              + [(f"../x{i}", b"") for i in range(30)])
    (folder_manifest := course.root / "submitted").mkdir()
    (folder_manifest / K.MANIFEST).write_text('{"x": 1, "a/b": {}}')
    reasons = _collect(course, tmp_path).reasons[(A, "frank")]
    assert len(reasons) == Z.MAX_NOTES + 2
    assert reasons[-2].endswith("frank_tiny.zip: 20 more members skipped")
    assert reasons[-1].endswith("only the other files of your archive "
                                "were collected")
    assert _files(course) == {f"submitted/frank/{A}/tiny.ipynb": b"frank's"}


def test_duplicates_keep_the_newest_download(course, tmp_path):
    _download(tmp_path, f"erin_{NAME}.ipynb", b"erin's first", OLD)
    _download(tmp_path, "erin_v2.zip", [("tiny.ipynb", b"erin's last")], NEW)
    _download(tmp_path, "yan_timestamp.txt", b"2000-01-01", OLD)
    _download(tmp_path, "zed_a.ipynb", b"zed a", OLD)
    _download(tmp_path, "zed_b.ipynb", b"zed b", OLD)
    any_file = r".*/(?P<student_id>[^/_]+)_(?P<file_id>[^/]+)$"
    report = _collect(course, tmp_path, regex=any_file)
    assert _files(course) == {
        f"submitted/erin/{A}/tiny.ipynb": b"erin's last",
        f"submitted/zed/{A}/b.ipynb": b"zed b"}
    assert report.reasons[(A, "erin")] == [
        f"2 downloads for this assignment: collected the newest, "
        f"{A}/archive/erin_v2.zip; not collected: "
        f"{A}/archive/erin_{NAME}.ipynb"]
    assert "(same time: the last name)" in report.reasons[(A, "zed")][0]
    assert "timestamp.txt is the grader's own file" in report.reasons[
        (A, "yan")][0]


def test_collecting_again_is_idempotent(course, tmp_path):
    _download(tmp_path, "erin_tiny.zip", [("tiny.ipynb", b"first"),
                                          ("../x", b"")], OLD)
    first = _collect(course, tmp_path)
    folder = course.root / "submitted" / "erin" / A
    stamp = (folder / "tiny.ipynb").stat().st_mtime_ns
    time.sleep(0.01)
    again = _collect(course, tmp_path)
    assert again.reasons == first.reasons != {}
    assert (folder / "tiny.ipynb").stat().st_mtime_ns == stamp
    assert K.reasons(course) == first.reasons
    # a newer download replaces the folder ...
    _download(tmp_path, "erin_tiny.zip", [("tiny.ipynb", b"second")], NEW)
    assert _collect(course, tmp_path).reasons == {}
    assert _files(course) == {f"submitted/erin/{A}/tiny.ipynb": b"second"}
    assert K.reasons(course) == {}
    # ... an older one, from another folder, does not
    older = tmp_path / "older"
    shutil.move(tmp_path / "downloads", tmp_path / "newer")
    _download(tmp_path, "erin_tiny.zip", [("tiny.ipynb", b"first")], OLD)
    shutil.move(tmp_path / "downloads", older)
    report = K.collect(course, [A], older)
    assert _files(course) == {f"submitted/erin/{A}/tiny.ipynb": b"second"}
    assert "kept the newer download collected before" in report.lines[0]


def test_a_folder_placed_by_hand_is_replaced_only_by_a_newer_download(
        course, tmp_path):
    folder = course.root / "submitted" / "hana" / A
    folder.mkdir(parents=True)
    (folder / "tiny.ipynb").write_bytes(b"by hand")
    _download(tmp_path, "hana_tiny.ipynb", b"downloaded", OLD)
    report = _collect(course, tmp_path)
    assert (folder / "tiny.ipynb").read_bytes() == b"by hand"
    assert "kept submitted/" in report.lines[0]
    future = time.time() + 3600
    _download(tmp_path, "hana_tiny.ipynb", b"downloaded", future)
    _collect(course, tmp_path)
    assert (folder / "tiny.ipynb").read_bytes() == b"downloaded"


def test_names_the_regex_does_not_match_are_reported(course, tmp_path):
    _download(tmp_path, "README.txt", b"instructions")
    _download(tmp_path, "nounderscore.ipynb", b"?")
    _download(tmp_path, ".DS_Store", b"junk")  # ignored silently
    os.symlink("/etc/passwd", tmp_path / "downloads" / A / "archive"
               / "ivan_tiny.ipynb")
    report = _collect(course, tmp_path)
    assert report.reasons == {} and _files(course) == {}
    assert report.lines == [
        f"{A}: not collected: {A}/archive/README.txt: its name does not "
        "match --collect-regex",
        f"{A}: not collected: {A}/archive/ivan_tiny.ipynb: not a regular "
        "file",
        f"{A}: not collected: {A}/archive/nounderscore.ipynb: its name "
        "does not match --collect-regex"]
    a_path = r".*/(?P<student_id>archive/[^/]+)=(?P<file_id>.+)$"
    _download(tmp_path, "x=tiny.ipynb", b"?")
    report = _collect(course, tmp_path, regex=a_path)
    assert "student id 'archive/x': expected a student id of letters" \
        in "\n".join(report.lines)
    assert _files(course) == {}
    with pytest.raises(ValueError, match="named group"):
        _collect(course, tmp_path, regex=r".*\.ipynb")
    with pytest.raises(ValueError, match="--collect-regex"):
        _collect(course, tmp_path, regex=r"(")
    with pytest.raises(ValueError, match="expected a folder of downloads"):
        K.collect(course, [A], tmp_path / "nowhere")


def test_names_are_bytes_and_ids_an_allow_list(course, tmp_path):
    """A download named in Latin-1 is collected; a student id outside
    letters, digits, ".", "_" and "-" (a Latin-1 letter, commas that
    would be CSV columns, a formula) is refused by name, with the rule,
    and nothing stops: collecting again changes nothing."""
    archive = tmp_path / "downloads" / A / "archive"
    archive.mkdir(parents=True)
    names = [b"alice_tiny.ipynb", b"bob_caf\xe9.ipynb",
             b"jos\xe9_tiny.ipynb", b"mallory,Doe,Mal,,16.0,16.0_tiny.ipynb",
             b'=HYPERLINK("evil")_tiny.ipynb', b"-rf_tiny.ipynb"]
    for name in names:
        with open(os.fsencode(archive) + b"/" + name, "wb") as handle:
            handle.write(b"{}")
    for _ in range(2):
        report = _collect(course, tmp_path)
        assert sorted(os.listdir(course.path("submitted"))) == [
            K.MANIFEST, "alice", "bob"]
        assert sorted(os.listdir(os.fsencode(course.path(
            "submitted", "bob", A)))) == [b"bob_caf\xe9.ipynb",
                                          b"timestamp.txt"]
        refused = [line for line in report.lines
                   if "expected a student id of letters" in line]
        assert len(refused) == 4, report.lines
        assert any("jos\\udce9" in line for line in refused)
    assert course.path("submitted", "bob", A).is_dir()
    hash_folder(course.path("submitted", "bob", A))


def test_one_students_error_in_collecting_is_that_students(
        course, tmp_path, monkeypatch):
    _download(tmp_path, f"alice_{NAME}.ipynb", b"{}")
    _download(tmp_path, f"bob_{NAME}.ipynb", b"{}")
    place = K._place

    def broken(course, download, *args):
        if download.student == "alice":
            raise UnicodeEncodeError("utf-8", "\udce9", 0, 1, "surrogate")
        return place(course, download, *args)

    monkeypatch.setattr(K, "_place", broken)
    report = _collect(course, tmp_path)
    assert _files(course) == {f"submitted/bob/{A}/{NAME}.ipynb": b"{}"}
    (line,) = report.lines
    assert line.startswith(f"{A}/alice: {A}/archive/alice_{NAME}.ipynb "
                           "could not be collected: UnicodeEncodeError")


def test_a_folder_hash_follows_no_link_and_takes_any_name(tmp_path):
    """Names as bytes, links by their target's name, a pipe by its kind:
    the hash of any folder can be taken, and changes with any of them."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{NAME}.ipynb").write_text("{}")
    plain = hash_folder(folder)
    with open(os.fsencode(folder) + b"/notes-\xff.txt", "w") as handle:
        handle.write("notes")
    with_notes = hash_folder(folder)
    os.symlink("/proc/self/mem", folder / "data.bin")
    os.mkfifo(folder / "pipe")
    (folder / "sub").mkdir()
    os.symlink("/", folder / "sub" / "root")
    first = hash_folder(folder)
    assert len({plain, with_notes, first}) == 3
    assert hash_folder(folder) == first
    os.unlink(folder / "data.bin")
    os.symlink("/proc/self/environ", folder / "data.bin")
    assert hash_folder(folder) != first
    os.symlink(folder, tmp_path / "link")
    assert hash_folder(tmp_path / "link") != first  # not followed


def test_submissions_are_folders_of_ids_never_links(course, tmp_path):
    top = course.path("submitted")
    for student in ("alice", "mallory,Doe,Mal,,16.0,16.0"):
        (top / student / A).mkdir(parents=True)
    (tmp_path / "elsewhere" / A).mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", top / "eve")
    (top / "trudy").mkdir()
    os.symlink(tmp_path / "elsewhere" / A, top / "trudy" / A)
    refused = []
    found = submissions(course, [A], refused)
    assert found == [(A, "alice", top / "alice" / A)]
    whys = {student: why for _, student, why in refused}
    assert sorted(whys) == ["eve", "mallory,Doe,Mal,,16.0,16.0", "trudy"]
    assert "expected a student id" in whys["mallory,Doe,Mal,,16.0,16.0"]
    assert "link" in whys["eve"] and "link" in whys["trudy"]


def _released(tmp_path):
    root = tmp_path / "course"
    source = root / "solutions" / A
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    released = release.generate(A, root=root,
                                destination=root / "chapters" / A)
    return root, nbformat.read(released / f"{NAME}.ipynb", 4)


def _text(notebook):
    return nbformat.writes(notebook).encode()


# student -> (score, status, reasons that must appear)
E2E = {
    "alice": (3, "graded", []),
    # her newest download (wrong answers, hostile members) is graded,
    # not her first (right answers), nor alice's
    "mallory": (0, "graded", [
        "2 downloads for this assignment: collected the newest, "
        f"{A}/archive/mallory_v2.zip",
        "notes.txt skipped: a path that leads out of the archive",
        "link skipped: a symbolic link",
        "inner.zip skipped: an archive inside"]),
    "carol": (0, "failed", ["carol_tiny.zip was not collected: not a zip",
                            "no notebook tiny.ipynb"]),
    "dave": (0, "failed", ["a zip bomb", "no notebook tiny.ipynb"]),
}


@pytest.mark.e2e
def test_a_class_collected_from_hostile_downloads_is_graded(tmp_path):
    root, released = _released(tmp_path)
    right, wrong = (_text(_answer(released, s)) for s in (RIGHT, WRONG))
    _download(tmp_path, f"alice_{NAME}.ipynb", right)
    _download(tmp_path, f"mallory_{NAME}.ipynb", right, OLD)
    _download(tmp_path, "mallory_v2.zip", [
        (f"submitted/alice/{A}/{NAME}.ipynb", wrong),
        (f"alice_{NAME}.ipynb", right), (f"../alice/{A}/notes.txt", b""),
        ("inner.zip", b"PK\x03\x04"),
        (_member("link", stat.S_IFLNK | 0o777), b"/etc/passwd")], NEW)
    _download(tmp_path, "carol_tiny.zip", b"not a zip at all")
    _zeros_zip(tmp_path / "downloads" / A / "archive" / "dave_tiny.zip",
               1024)
    _download(tmp_path, "README.txt", b"from the LMS")
    options = Options(root=root, timeout=10, progress=False, jobs=2,
                      collect=tmp_path / "downloads")
    outcomes = grade_class(options)
    text = summary(outcomes)
    print(text)
    assert f"{A}/archive/README.txt: its name does not match" in text
    found = {o.student: o for o in outcomes}
    assert len(outcomes) == len(found) == len(E2E)
    for student, (score, status, reasons) in E2E.items():
        outcome = found[student]
        assert (outcome.score, outcome.status) == (score, status), outcome
        for reason in reasons:
            assert reason in "; ".join(outcome.reasons), (reason, outcome)
    assert found["alice"].reasons == []
    page = (root / "feedback" / "mallory" / A / f"{NAME}.html").read_text()
    assert "About your submission" in page and "a symbolic link" in page
    page = (root / "feedback" / "dave" / A / f"{NAME}.html").read_text()
    assert "a zip bomb" in page
    assert sorted(os.listdir(root / "submitted")) == [
        K.MANIFEST, "alice", "carol", "dave", "mallory"]
    # the download's time is the submission's (test_term)
    assert sorted(os.listdir(root / "submitted" / "alice" / A)) == [
        "timestamp.txt", f"{NAME}.ipynb"]
    assert (root / "submitted" / "alice" / A / f"{NAME}.ipynb"
            ).read_bytes() == right
    rows = (root / "grades.csv").read_text().splitlines()
    assert len(rows) == 1 + len(E2E)
    assert any(",2023-11-14 22:13:20,alice," in row for row in rows), rows
    # collecting and grading again: nothing changes, the reasons stay
    again = grade_class(options)
    assert {o.status for o in again} == {"unchanged"}
    assert [o.reasons for o in again] == [o.reasons for o in outcomes]
    assert f"{A}/archive/README.txt" in summary(again)
