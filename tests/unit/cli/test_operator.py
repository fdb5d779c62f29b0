"""`multinode operator`'s start: its first log line names the version, before anything can end the process."""

from __future__ import annotations

import logging

import pytest

from multinode.cli import operator
from multinode.cli.main import build_parser
from tests.support.packaging import PROJECT_VERSION


def test_the_first_log_line_names_the_version_even_when_a_setting_then_fails(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("kopf", "kopf.activities.startup"):  # run() sets their levels: restored after the test
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    monkeypatch.setenv("MULTINODE_WORKERS", "0")  # refused by OperatorSettings: the process ends there
    caplog.set_level(logging.INFO)
    with pytest.raises(ValueError, match="workers"):
        operator.run(build_parser().parse_args(["operator", "--metrics-port", "0"]))
    assert caplog.records[0].name == "multinode"
    assert caplog.records[0].getMessage() == f"multinode operator {PROJECT_VERSION} starting"


def test_leader_election_timings_that_let_two_replicas_act_at_once_end_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("kopf", "kopf.activities.startup"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    for variable, value in {"MULTINODE_LEADER_ELECTION": "true", "MULTINODE_LEASE_DURATION_SECONDS": "11",
                            "MULTINODE_RENEW_DEADLINE_SECONDS": "10", "MULTINODE_RETRY_PERIOD_SECONDS": "8",
                            "POD_NAMESPACE": "ops"}.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=r"lease duration \(11s\) must exceed the renew deadline plus the retry "
                                         r"period \(10s \+ 8s\)"):
        operator.run(build_parser().parse_args(["operator", "--metrics-port", "0"]))
