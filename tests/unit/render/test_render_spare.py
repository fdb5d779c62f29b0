"""A hot spare's pod (render/spare.py): a node pod without a rank, its image pulled with it, waiting in its
preflight for the rank the operator writes into its annotations, which its trainer then reads."""

from __future__ import annotations

from multinode.api.constants import LABEL_ATTEMPT, LABEL_NODE_INDEX, LABEL_SPARE
from multinode.reconcile.observe import observe_pod
from multinode.render import RenderSettings, render_node_pod
from multinode.render.spare import SPARE_IMAGE_VOLUME, render_spare_pod, take_rank_annotations
from multinode.testing import IMAGE, preflight, stored_job, trainer

SETTINGS = RenderSettings()


def _job(**spec):
    return stored_job(3, spareNodes=1, failurePolicy={"restartStrategy": "InPlace"}, **spec)


def _field(var: dict) -> str | None:
    return ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")


def test_a_spare_has_no_rank_no_attempt_and_a_hostname_of_its_own() -> None:
    spare = render_spare_pod(_job(), 4, SETTINGS)
    meta, spec = spare["metadata"], spare["spec"]
    assert meta["name"] == spec["hostname"] == "llama-s4"
    assert meta["labels"][LABEL_SPARE] == "4"
    assert LABEL_NODE_INDEX not in meta["labels"] and LABEL_ATTEMPT not in meta["labels"]
    assert not [k for k in meta.get("annotations", {}) if k.startswith("multinode.dev/")], "no attempt: it waits"
    assert spec["subdomain"] == "llama"


def test_its_trainer_reads_its_rank_the_attempt_and_the_rendezvous_from_its_annotations() -> None:
    env = {var["name"]: var for var in trainer(render_spare_pod(_job(), 0, SETTINGS))["env"]}
    for name in ("NODE_RANK", "PET_NODE_RANK", "MULTINODE_NODE_INDEX", "BT_NODE_RANK"):
        assert _field(env[name]) == "metadata.annotations['multinode.dev/node-index']"
    for name in ("MASTER_ADDR", "PET_MASTER_ADDR"):
        assert _field(env[name]) == "metadata.annotations['multinode.dev/leader']"
    assert _field(env["MASTER_PORT"]) == "metadata.annotations['multinode.dev/rendezvous-port']"
    assert _field(env["PET_RDZV_ID"]) == "metadata.annotations['multinode.dev/rendezvous-id']"
    assert _field(env["MULTINODE_ATTEMPT"]) == "metadata.annotations['multinode.dev/attempt']"
    # What every attempt shares is inline: a spare outlives attempts and their ConfigMaps.
    assert env["NNODES"]["value"] == "3" and env["MULTINODE_JOB_NAME"]["value"] == "llama"
    assert "envFrom" not in trainer(render_spare_pod(_job(), 0, SETTINGS))


def test_its_image_is_pulled_with_the_pod_and_its_preflight_waits_for_a_rank() -> None:
    spare = render_spare_pod(_job(imagePullPolicy="IfNotPresent"), 0, SETTINGS, image=f"{IMAGE}@sha256:" + "a" * 64)
    volumes = {v["name"]: v for v in spare["spec"]["volumes"]}
    assert volumes[SPARE_IMAGE_VOLUME]["image"] == {"reference": f"{IMAGE}@sha256:" + "a" * 64,
                                                    "pullPolicy": "IfNotPresent"}
    assert trainer(spare)["image"] == f"{IMAGE}@sha256:" + "a" * 64
    args = preflight(spare)["args"]
    assert "--spare" in args and "--in-place-attempt-file" in args and "--node-index" not in args


def test_it_shares_no_machine_with_any_pod_of_the_job_and_the_gang_stays_off_its_machine() -> None:
    job = _job()
    terms = render_spare_pod(job, 0, SETTINGS)["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[-1] == {"labelSelector": {"matchLabels": {"multinode.dev/job-name": "llama"}},
                         "topologyKey": "kubernetes.io/hostname"}
    node_terms = render_node_pod(job, 1, 0, SETTINGS)["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert node_terms[-1]["labelSelector"]["matchExpressions"] == [{"key": LABEL_SPARE, "operator": "Exists"}]
    without = render_node_pod(stored_job(3), 1, 0, SETTINGS)["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(without) == len(node_terms) - 1, "a job without spares has no such term"


def test_observed_a_spare_waits_until_its_annotations_give_it_a_rank() -> None:
    job = _job()
    spare = render_spare_pod(job, 2, SETTINGS)
    waiting = observe_pod(spare)
    assert waiting is not None and waiting.waiting_spare and (waiting.spare, waiting.index) == (2, -1)
    spare["metadata"]["annotations"] = take_rank_annotations(job, 0, 3, "", 1, "llama-s2.llama.ml.svc")
    joined = observe_pod(spare)
    assert joined is not None and not joined.waiting_spare
    assert (joined.index, joined.attempt, joined.in_place_attempt, joined.spare) == (0, 3, 3, 2)
