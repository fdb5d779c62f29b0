"""What an InPlace job's node pod carries (render/in_place.py): the trainer's restart rule, the annotations its
in-place env is read from, and preflight's barrier with its two volumes. Other jobs' pods carry none of it."""

from __future__ import annotations

from multinode.api.constants import (ANNOTATION_ATTEMPT, ANNOTATION_LEADER, ANNOTATION_RESUME_FROM,
                                     ANNOTATION_TRAINER_RESTARTS)
from multinode.render import render_node_pod
from multinode.render.in_place import (BARRIER_ATTEMPT_FILE, BARRIER_LEADER_FILE, BARRIER_STATE_FILE,
                                      trainer_restart_rules)
from multinode.testing import checkpointed_job, preflight, stored_job, trainer


def _in_place(**policy):
    return stored_job(2, failurePolicy={"restartStrategy": "InPlace", **policy})


def test_the_trainer_restarts_the_pod_in_place_on_every_non_zero_code() -> None:
    container = trainer(render_node_pod(_in_place(), 1, 0))
    assert container["restartPolicy"] == "Never"
    assert container["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]


def test_codes_a_rule_names_are_left_to_the_pod_failure() -> None:
    job = _in_place(rules=[{"action": "FailJob", "onExitCodes": [{"min": 2, "max": 3}]},
                           {"action": "Restart", "onExitCodes": [{"min": 9, "max": 9}]}])
    (rule,) = trainer_restart_rules(job)
    assert rule["exitCodes"] == {"operator": "NotIn", "values": [0, 2, 3]}, "a plain Restart rule is in place"


def test_a_rule_naming_most_codes_leaves_the_few_others_in_place_as_an_in_list() -> None:
    job = _in_place(rules=[{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 250}]}])
    (rule,) = trainer_restart_rules(job)
    assert rule["exitCodes"] == {"operator": "In", "values": [251, 252, 253, 254, 255]}
    every = _in_place(rules=[{"action": "FailJob", "onExitCodes": [{"min": 0, "max": 255}]}])
    assert trainer_restart_rules(every) == []
    assert "restartPolicyRules" not in trainer(render_node_pod(every, 0, 0))


def test_the_attempt_and_resume_path_are_annotations_the_trainer_reads_at_each_start() -> None:
    job = checkpointed_job()
    job.spec.failure_policy.restart_strategy = "InPlace"
    pod = render_node_pod(job, 0, 4, resume_from="/ckpt/step-9", restarts=2)
    annotations = pod["metadata"]["annotations"]
    assert (annotations[ANNOTATION_ATTEMPT], annotations[ANNOTATION_RESUME_FROM],
            annotations[ANNOTATION_TRAINER_RESTARTS]) == ("4", "/ckpt/step-9", "0")
    env = {var["name"]: var for var in trainer(pod)["env"]}
    for name, annotation in (("MULTINODE_ATTEMPT", ANNOTATION_ATTEMPT),
                             ("MULTINODE_RESUME_FROM", ANNOTATION_RESUME_FROM),
                             ("BT_LOAD_CHECKPOINT_DIR", ANNOTATION_RESUME_FROM)):
        assert env[name] == {"name": name, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{annotation}']"}}}
    names = [var["name"] for var in trainer(pod)["env"]]
    assert len(names) == len(set(names)), "each variable once: the annotation's replaces the inline value"
    # multinode.progress.leave_on_new_attempt watches the attempt file, mounted read-only into the trainer.
    assert env["MULTINODE_ATTEMPT_FILE"] == {"name": "MULTINODE_ATTEMPT_FILE", "value": BARRIER_ATTEMPT_FILE}
    mount = next(m for m in trainer(pod)["volumeMounts"] if BARRIER_ATTEMPT_FILE.startswith(m["mountPath"]))
    assert mount["readOnly"] is True


def test_preflight_waits_at_the_barrier_with_the_attempt_file_and_its_state() -> None:
    pod = render_node_pod(_in_place(), 0, 0)
    init = preflight(pod)
    args = init["args"]
    assert args[args.index("--in-place-attempt-file") + 1] == BARRIER_ATTEMPT_FILE
    assert args[args.index("--in-place-state-file") + 1] == BARRIER_STATE_FILE
    assert "--in-place-leader-file" not in args, "no spares: every rank keeps its name, each is resolved"
    spares = stored_job(2, spareNodes=1, failurePolicy={"restartStrategy": "InPlace"})
    spared = preflight(render_node_pod(spares, 0, 0))["args"]
    assert spared[spared.index("--in-place-leader-file") + 1] == BARRIER_LEADER_FILE
    mounted = {m["name"] for m in init["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounted <= set(volumes)
    downward = next(v for v in volumes.values() if "downwardAPI" in v)
    assert downward["downwardAPI"]["items"] == [
        {"path": "attempt", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_ATTEMPT}']"}},
        {"path": "leader", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_LEADER}']"}}]
    mount_path = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == downward["name"])
    assert BARRIER_LEADER_FILE == f"{mount_path}/leader"


def test_other_jobs_pods_carry_none_of_it() -> None:
    pod = render_node_pod(stored_job(2), 0, 0)
    assert ANNOTATION_ATTEMPT not in (pod["metadata"].get("annotations") or {})
    assert "restartPolicyRules" not in trainer(pod) and "--in-place-attempt-file" not in preflight(pod)["args"]
