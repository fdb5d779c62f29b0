"""Hostile TrainingJobs: every one is refused at admission with a field-level message, or, once admitted,
ends with a status that says what happened, from an operator that keeps running.

1. Hand-written specs (hostile_cases.py; beyond test_admission.py): wrong types, huge values, unicode and control
   characters, bad ints, empty and duplicate list items, injection-looking strings, names we use, peers'
   fields, metadata.name edge cases, malformed YAML documents.
2. Generated specs (hypothesis, derandomized): the valid maximal_job() and a small training_job() with
   one value replaced by random JSON, a required key deleted or an unknown key inserted; arbitrary JSON
   trees as spec; and specs shaped like the schema with random contents.
   Every send is a server-side dry run with fieldValidation=Strict. What "field-level" means exactly is
   in hostile.py; mutants must also name the spec field they mutated.
   Each of these tests sends its own spec and judges its own outcome: a rejection names the field, an
   admitted spec is one the operator's models accept.
3. Every admitted hand-written spec, and generated ones up to MAX_CREATED in all, are created for real
   in a namespace the session operator watches (the module fixture `hostile_runs` sends and draws them
   itself, so this and the totals pass alone and in any order): each gets a phase and a condition reason, a Failed job
   leaves no pod pending or running, a reconcile fails again and again only where the cluster forbids
   the pods (403, retried by design), the operator stays up, and its log shows no traceback from
   multinode code.
4. The totals, with a one-line summary.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION, TrainingJob
from tests.integration.api import hostile
from tests.integration.api.hostile_cases import CASES, Case, Runs
from tests.integration.api.hostile import Ledger, Mutant, Outcome, named_fields, names_mutated_field
from tests.support.jobs import job_pods
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

MAX_CREATED = 32
SETTLE_SECONDS = 90


def test_there_are_enough_hand_written_cases() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


def sent(custom: client.CustomObjectsApi, api: client.ApiClient, namespace: str, body: dict | str) -> Outcome:
    return hostile.send_yaml(api, namespace, body) if isinstance(body, str) else hostile.send(custom, namespace, body)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hand_written_spec(custom: client.CustomObjectsApi, api: client.ApiClient, admission_namespace: str,
                           case: Case) -> None:
    outcome = sent(custom, api, admission_namespace, case.body)
    if case.runs is not None:
        assert outcome.admitted, f"expected the apiserver to admit it (the operator's turn): {outcome}"
        assert_models_accept(outcome)
    elif case.status is not None:
        assert outcome.status == case.status, outcome
        assert case.why in outcome.message, outcome
    else:
        assert not outcome.admitted, f"admitted: {outcome.stored}"
        fields = named_fields(outcome)
        assert any(f == case.field or f.startswith(case.field) for f in fields), (case.field, fields, outcome)
        assert case.why in outcome.message, outcome


# ---- generated -------------------------------------------------------------------------------------

GENERATED = settings(deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                            HealthCheck.data_too_large, HealthCheck.large_base_example])


def assert_models_accept(outcome: Outcome) -> None:
    """An admitted object the operator's models refuse would mean the CRD and the models disagree (the
    operator would fail it with InvalidSpec; test_admitted_hostile_specs_end_well checks that it does not)."""
    assert outcome.stored is not None
    TrainingJob.model_validate(outcome.stored)


def judge(custom: client.CustomObjectsApi, namespace: str, id_: str, body: dict,
          mutated: hostile.JsonPath | None = None) -> Outcome:
    """Send `body`: admitted, the operator's models must accept it (what the operator then makes of it is
    test_admitted_hostile_specs_end_well's); rejected, the message must name a field, the mutated one if any."""
    outcome = hostile.send(custom, namespace, body)
    if outcome.admitted:
        assert_models_accept(outcome)
        return outcome
    fields = named_fields(outcome)
    if mutated is not None:
        assert names_mutated_field(fields, mutated), f"{id_}: the rejection names {fields}, not the mutated field"
    return outcome


# Each generated kind: its source name in the totals, its strategy (of Mutants, or of specs), and how many
# examples the test draws; hostile_runs draws the same numbers again for its own ledger.
REPLACED = ("replace", st.sampled_from(sorted(hostile.BASES)).flatmap(hostile.replacements), 70)
DELETED = ("delete", hostile.deletions(), 25)
INSERTED = ("insert", hostile.insertions(), 30)
ARBITRARY = ("arbitrary", hostile.arbitrary_specs, 30)
SCHEMA_SHAPED = ("schema-shaped", hostile.schema_shaped_specs(), 40)
GENERATED_KINDS = (REPLACED, DELETED, INSERTED, ARBITRARY, SCHEMA_SHAPED)
GENERATED_SOURCES = tuple(source for source, _, _ in GENERATED_KINDS)


@settings(GENERATED, max_examples=REPLACED[2])
@given(mutant=REPLACED[1])
def test_one_value_replaced(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    judge(custom, admission_namespace, mutant.id, mutant.body, mutant.path)


@settings(GENERATED, max_examples=DELETED[2])
@given(mutant=DELETED[1])
def test_required_key_deleted(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    outcome = hostile.send(custom, admission_namespace, mutant.body)
    assert not outcome.admitted, f"{mutant.id}: admitted without a required field"
    fields = named_fields(outcome)
    assert hostile.render(mutant.path) in fields or names_mutated_field(fields, mutant.path), (mutant.id, fields)
    assert "Required value" in outcome.message, outcome


@settings(GENERATED, max_examples=INSERTED[2])
@given(mutant=INSERTED[1])
def test_unknown_key_inserted(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    outcome = judge(custom, admission_namespace, mutant.id, mutant.body, mutant.path)
    # Into an object with a closed schema (not a map, not a pass-through that keeps unknown fields), an
    # unknown key is refused by strict decoding, which names it under its parent.
    parent = hostile.schema_at(mutant.path[:-1])
    if parent is not None and "properties" in parent and not parent.get("x-kubernetes-preserve-unknown-fields"):
        assert outcome.status == 400 and "unknown field" in outcome.message, outcome
        under = hostile.render(mutant.path[:-1]) + "."
        assert any(f.startswith(under) for f in named_fields(outcome)), (under, outcome)


@settings(GENERATED, max_examples=ARBITRARY[2])
@given(spec=ARBITRARY[1])
def test_arbitrary_spec(custom: client.CustomObjectsApi, admission_namespace: str, spec) -> None:
    judge(custom, admission_namespace, "arbitrary", hostile.job_with_spec(spec))


@settings(GENERATED, max_examples=SCHEMA_SHAPED[2])
@given(spec=SCHEMA_SHAPED[1])
def test_schema_shaped_spec(custom: client.CustomObjectsApi, admission_namespace: str, spec: dict) -> None:
    judge(custom, admission_namespace, "schema-shaped", hostile.job_with_spec(spec))


def sent_specs(custom: client.CustomObjectsApi, api: client.ApiClient, namespace: str) -> Ledger:
    """Every hand-written case and as many generated specs of each kind as its test draws, sent (dry run)
    and recorded: what the creation test and the totals start from, whichever of them runs, alone or not."""
    ledger = Ledger()
    for case in CASES:
        ledger.record("hand-written", case.id, case.body, sent(custom, api, namespace, case.body))
    for source, strategy, examples in GENERATED_KINDS:
        draw_into(ledger, source, strategy, examples, lambda body: hostile.send(custom, namespace, body))
    return ledger


def draw_into(ledger: Ledger, source: str, strategy: st.SearchStrategy, examples: int,
              send: Callable[[dict], Outcome]) -> None:
    @settings(GENERATED, max_examples=examples)
    @given(drawn=strategy)
    def record(drawn) -> None:
        id_, body = (drawn.id, drawn.body) if isinstance(drawn, Mutant) else (source, hostile.job_with_spec(drawn))
        ledger.record(source, id_, body, send(body))

    record()


# ---- admitted specs, created for real --------------------------------------------------------------


def creatable(body: object) -> bool:
    """Small enough for the shared cluster, and not deleted by its own TTL before we look."""
    spec = body.get("spec") if isinstance(body, dict) else None
    return (isinstance(spec, dict) and type(spec.get("numNodes")) is int and 1 <= spec["numNodes"] <= 4
            and "ttlSecondsAfterFinished" not in spec)


def chosen_for_creation(ledger: Ledger) -> list[tuple[str, hostile.Sent, Runs | None]]:
    """Every admitted hand-written case, then generated ones round-robin over their kind and base."""
    expected = {c.id: c.runs for c in CASES if c.runs is not None}
    hand = [s for s in ledger.admitted("hand-written") if s.id in expected]
    assert len(hand) <= MAX_CREATED - 8, "leave room for generated specs"
    groups: dict[str, list[hostile.Sent]] = {}
    for spec in sorted(ledger.admitted(*GENERATED_SOURCES), key=lambda s: hostile.fingerprint(s.body)):
        if creatable(spec.body):
            groups.setdefault(":".join(spec.id.split(":")[:2]), []).append(spec)
    generated: list[hostile.Sent] = []
    while len(hand) + len(generated) < MAX_CREATED and any(groups.values()):
        for _, queue in sorted(groups.items()):
            if queue and len(hand) + len(generated) < MAX_CREATED:
                generated.append(queue.pop(0))
    return ([(f"hw{i:02d}", s, expected[s.id]) for i, s in enumerate(hand)]
            + [(f"gen{i:02d}", s, None) for i, s in enumerate(generated)])


def for_real(name: str, body: dict) -> dict:
    """The admitted body under a unique name; of its metadata only labels, annotations and generateName
    (a finalizer or owner reference would outlive the test)."""
    body = copy.deepcopy(body)
    metadata = {k: v for k, v in (body.get("metadata") or {}).items()
                if k in ("labels", "annotations", "generateName")}
    if "generateName" in metadata:
        metadata["generateName"] = f"{name}-"
    else:
        metadata["name"] = name
    body["metadata"] = metadata
    return body


def problems(job: dict, pods: list, expected: Runs | None) -> str | None:
    """Why `job` is not (yet) where it must end; None once it is."""
    status = job.get("status") or {}
    phase = status.get("phase")
    if not phase:
        return "no status.phase"
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    explaining = conditions.get("Failed" if phase == "Failed" else "Running")
    if explaining is None or not explaining.get("reason"):
        return f"phase {phase} without a condition reason: {conditions}"
    if phase == "Failed":
        active = [p.metadata.name for p in pods if p.status.phase in ("Pending", "Running")
                  and not p.metadata.deletion_timestamp]
        if active:
            return f"Failed, but pods still active: {active}"
    if expected is not None and (phase, explaining["reason"]) != (expected.phase, expected.reason):
        return f"{phase}/{explaining['reason']}, expected {expected.phase}/{expected.reason}"
    if expected is not None and expected.says not in explaining.get("message", ""):
        return f"message {explaining.get('message', '')[:300]!r} does not say {expected.says!r}"
    return None


def tracebacks_in_our_code(log: str) -> list[str]:
    blocks = re.split(r"(?=Traceback \(most recent call last\):)", log)[1:]
    return [b[:3000] for b in blocks if re.search(r'File "[^"]*/multinode/', b)]


@dataclass
class HostileRuns:
    """The admitted specs created for real and settled: each name's spec and expected ending, the
    operator's log from their creation on, the jobs as they ended, and the dry-run ledger they came from."""

    ledger: Ledger
    namespace: str
    names: dict[str, tuple[hostile.Sent, Runs | None]]
    log: str
    jobs: dict[str, dict] = field(default_factory=dict)


@pytest.fixture(scope="module")
def hostile_runs(custom: client.CustomObjectsApi, api: client.ApiClient, core: client.CoreV1Api,
                 admission_namespace: str, module_job_namespace: str, operator: OperatorProcess) -> HostileRuns:
    job_namespace = module_job_namespace
    ledger = sent_specs(custom, api, admission_namespace)
    chosen = chosen_for_creation(ledger)
    log_start = operator.log_path.stat().st_size
    names: dict[str, tuple[hostile.Sent, Runs | None]] = {}
    for name, spec, expected in chosen:
        created = custom.create_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL,
                                                         for_real(name, spec.body))
        names[created["metadata"]["name"]] = (spec, expected)

    def pending() -> dict[str, str]:
        jobs = {j["metadata"]["name"]: j for j in
                custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"]}
        left = {}
        for name, (_, expected) in names.items():
            why = "gone" if name not in jobs else problems(jobs[name], job_pods(core, job_namespace, name), expected)
            if why:
                left[name] = why
        return left

    last: dict[str, str] = {}

    def settled() -> bool:
        nonlocal last
        last = pending()
        return not last

    try:
        wait_for(settled, timeout=SETTLE_SECONDS, what="every admitted hostile job to settle")
    except AssertionError:
        # The operator's log first and only a few jobs: CI shows the start of a failure, not all of it.
        detail = {n: (why, names[n][0].id, json.dumps(names[n][0].body)[:400]) for n, why in list(last.items())[:5]}
        raise AssertionError(f"{len(last)} jobs did not settle; operator log:\n{operator.log_tail(60)}\n"
                             f"the first of them: {json.dumps(detail, indent=1)}") from None

    assert operator.proc is not None and operator.proc.poll() is None, f"operator exited:\n{operator.log_tail()}"
    with open(operator.log_path, encoding="utf-8", errors="replace") as f:
        f.seek(log_start)
        runs = HostileRuns(ledger, job_namespace, names, f.read())
    runs.jobs = {j["metadata"]["name"]: j for j in
                 custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"]}
    for name in names:
        status = runs.jobs[name]["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        reason = (conditions.get("Failed") if status["phase"] == "Failed" else conditions["Running"])["reason"]
        ledger.runtime[name] = f"{status['phase']}/{reason}"

    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)
    wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"],
             timeout=60, what="hostile jobs deleted")
    return runs


def test_admitted_hostile_specs_end_well(hostile_runs: HostileRuns) -> None:
    assert hostile_runs.names, "no admitted spec was created"
    assert not tracebacks_in_our_code(hostile_runs.log), tracebacks_in_our_code(hostile_runs.log)
    for name, (spec, _) in hostile_runs.names.items():
        conditions = {c["type"]: c for c in hostile_runs.jobs[name]["status"]["conditions"]}
        reason = hostile_runs.ledger.runtime[name].split("/")[1]
        # A stored object the operator's models refuse would mean the CRD and the models disagree.
        assert reason != "InvalidSpec", (spec.id, conditions["Failed"]["message"])
        if reason == "PodCreationFailed":
            assert re.search(r"\b(spec|metadata)\.", conditions["Failed"]["message"]), conditions["Failed"]
        # The worker retries only what the cluster may still allow (403); anything else failing a
        # reconcile again and again is a handler that cannot cope with the job.
        retried = hostile_runs.log.count(f"reconcile of {hostile_runs.namespace}/{name} failed")
        assert retried == 0 or reason == "PodCreationForbidden", (spec.id, retried, reason)


# ---- totals ----------------------------------------------------------------------------------------


def test_totals(hostile_runs: HostileRuns, capsys: pytest.CaptureFixture) -> None:
    ledger = hostile_runs.ledger
    assert {s.source for s in ledger.sent.values()} == {"hand-written", *GENERATED_SOURCES}
    assert ledger.runtime, "no admitted spec was created"
    sent_ = list(ledger.sent.values())
    hand = sum(s.source == "hand-written" for s in sent_)
    rejected_ = sum(not s.outcome.admitted for s in sent_)
    phases = [v.split("/")[0] for v in ledger.runtime.values()]
    failed = phases.count("Failed")
    by_outcome: dict[str, int] = {}
    for value in ledger.runtime.values():
        by_outcome[value] = by_outcome.get(value, 0) + 1
    admitted_by_source = {source: len(ledger.admitted(source)) for source in ("hand-written", *GENERATED_SOURCES)}
    summary = (f"hostile specs: {len(sent_)} sent ({hand} hand-written, {len(sent_) - hand} generated); "
               f"{rejected_} rejected at admission, {len(sent_) - rejected_} admitted {admitted_by_source}; "
               f"{len(phases)} created: {failed} admitted-and-failed, {len(phases) - failed} admitted-and-running "
               f"(not failed; {phases.count('Running')} Running); {dict(sorted(by_outcome.items()))}")
    with capsys.disabled():
        print(f"\n{summary}")
    assert len(sent_) >= 200, summary
    assert hand >= 60 and len(sent_) - hand >= 150, summary
