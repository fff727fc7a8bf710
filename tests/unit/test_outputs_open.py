"""``track.outputs.opened_inside``: the file an output read opened is judged by where it is,
not by the path checked before the open (a directory of the path swapped for a symbolic link
in between leads elsewhere)."""

from __future__ import annotations

import os

from seml_hydra.track.outputs import opened_inside


def test_a_file_opened_through_a_swapped_directory_is_not_inside_the_folder(tmp_path):
    folder, elsewhere = tmp_path / "folder", tmp_path / "elsewhere"
    (folder / "123").mkdir(parents=True)
    elsewhere.mkdir()
    (folder / "123" / "123_0_log.out").write_text("own\n")
    (elsewhere / "123_0_log.out").write_text("private\n")
    root = os.path.realpath(folder)
    fd = os.open(folder / "123" / "123_0_log.out", os.O_RDONLY)
    try:
        assert opened_inside(fd, root)
    finally:
        os.close(fd)
    # what the open meets when `123` became a link to another directory after the check
    (folder / "123" / "123_0_log.out").unlink()
    (folder / "123").rmdir()
    (folder / "123").symlink_to(elsewhere)
    fd = os.open(folder / "123" / "123_0_log.out", os.O_RDONLY | os.O_NOFOLLOW)
    try:
        assert not opened_inside(fd, root)
        assert not opened_inside(fd, os.path.realpath(elsewhere / "123_0_log.out"))
    finally:
        os.close(fd)
