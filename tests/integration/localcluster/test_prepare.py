"""`localcluster prepare`: the slow builds run side by side, a failed lane fails the whole, logs are kept.

The lanes here are small real processes: the point is how prepare runs them, not what they build (the
whole suite runs the real prepare first, through `make test`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from localcluster import binaries, prepare

WAIT_SECONDS = 30


def _lane(name: str, code: str) -> prepare.Lane:
    return prepare.Lane(name, [sys.executable, "-c", code])


def _meets(mine: Path, other: Path) -> str:
    """A lane that announces itself, then waits for the other lane: it can end only if both run at once."""
    return (f"import pathlib, time\n"
            f"pathlib.Path({str(mine)!r}).touch()\n"
            f"deadline = time.monotonic() + {WAIT_SECONDS}\n"
            f"while not pathlib.Path({str(other)!r}).exists():\n"
            f"    assert time.monotonic() < deadline, 'the other lane never ran beside this one'\n"
            f"    time.sleep(0.01)\n"
            f"print('met')\n")


def test_lanes_run_side_by_side_and_keep_their_logs(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    failed = prepare.run_lanes([_lane("one", _meets(a, b)), _lane("two", _meets(b, a))], tmp_path / "logs")
    assert failed == []
    for name in ("one", "two"):
        assert (tmp_path / "logs" / f"prepare-{name}.log").read_text() == "met\n"


def test_a_failed_lane_is_named_shows_its_log_and_the_others_still_finish(tmp_path: Path, capsys) -> None:
    done = tmp_path / "done"
    broken = "import sys; print('go: downloading example.com/m v1.0.0'); print('no module proxy'); sys.exit(3)"
    failed = prepare.run_lanes([_lane("broken", broken),
                                _lane("fine", f"import pathlib; pathlib.Path({str(done)!r}).touch()")],
                               tmp_path / "logs")
    assert failed == ["broken"]
    assert done.exists()
    err = capsys.readouterr().err
    assert "[broken] no module proxy" in err
    assert "[broken] | go: downloading example.com/m v1.0.0" in err, "the hidden lines of a failed lane are shown"
    assert f"[broken] FAILED (exit 3; log: {tmp_path / 'logs' / 'prepare-broken.log'})" in err


def test_go_download_chatter_stays_in_the_log(tmp_path: Path, capsys) -> None:
    chatty = ("print('go: downloading example.com/m v1.0.0'); print('go: added example.com/m v1.0.0'); "
              "print('[build] m: 1s')")
    assert prepare.run_lanes([_lane("go", chatty)], tmp_path / "logs") == []
    err = capsys.readouterr().err
    assert "[go] [build] m: 1s" in err and "example.com" not in err
    assert "go: downloading example.com/m v1.0.0" in (tmp_path / "logs" / "prepare-go.log").read_text()


def test_every_component_of_the_build_script_is_in_exactly_one_lane() -> None:
    script = binaries.BUILD_SCRIPT.read_text()
    default = next(line for line in script.splitlines() if line.strip().startswith("components=(debs"))
    built_by_default = set(default.split("(", 1)[1].rstrip(")").split())
    lanes = prepare.lanes(images=True, peers=True, frameworks=True, release=True)
    go = [c for lane in lanes if lane.command[0] == str(binaries.BUILD_SCRIPT) for c in lane.command[1:]]
    in_lanes = [*prepare.FIRST, *go]
    assert sorted(in_lanes) == sorted(set(in_lanes)), "a component is built by two lanes at once"
    assert built_by_default | set(prepare.PEERS) | set(prepare.GITOPS) | set(prepare.RELEASE_TOOLS) == set(in_lanes)
    assert {lane.name for lane in lanes} >= {"torch", "images"}
    assert {lane.name for lane in prepare.lanes(images=False, peers=False)} == {"go-kubernetes", "go-rest"}
