"""An elastic job's rendezvous (render/rendezvous_store.py, render/elastic_env.py): torchrun's elastic flags in
the attempt's ConfigMap, each node's own address, and the store's pod: away from training nodes, restricted,
in the trainer's image and environment, on the attempt's port."""

from __future__ import annotations

from multinode.api.constants import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_RENDEZVOUS_STORE
from multinode.reconcile.observe import observe_pod
from multinode.render import render_attempt_env, render_node_pod
from multinode.render.env import rendezvous_port
from multinode.render.rendezvous_store import STORE_PROGRAM, render_store_pod
from multinode.testing import stored_job

VOLUMES = {"volumes": [{"name": "torch", "hostPath": {"path": "/opt/torch", "type": "Directory"}}],
           "volumeMounts": [{"name": "torch", "mountPath": "/opt/torch", "readOnly": True}],
           "nodeSelector": {"pool": "train"}}


def _job(**spec):
    return stored_job(3, elastic={"minNodes": 2, "belowMinTimeoutSeconds": 300}, **spec)


def test_the_attempt_carries_torchruns_elastic_flags_on_the_store() -> None:
    data = render_attempt_env(_job(), 2)["data"]
    port = rendezvous_port(29500, 2)
    assert data["PET_NNODES"] == "2:3"
    assert data["PET_RDZV_BACKEND"] == "c10d"
    assert data["PET_RDZV_ENDPOINT"] == f"llama-rdzv.llama.ml.svc:{port}"
    assert data["PET_RDZV_ID"] == data["MULTINODE_RDZV_ID"] == "uid-123-a2"
    # The agents are the store's clients; torchrun's join timeout is past the operator's own wait.
    conf = dict(kv.split("=") for kv in data["PET_RDZV_CONF"].split(","))
    assert conf["is_host"] == "false" and int(conf["join_timeout"]) > 300
    assert data["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and int(data["PET_MAX_RESTARTS"]) >= 10
    assert data["MULTINODE_MIN_NODES"] == "2"
    # A static job has none of them.
    static = render_attempt_env(stored_job(3), 2)["data"]
    assert static["PET_NNODES"] == "3" and "PET_RDZV_BACKEND" not in static


def test_each_node_gives_its_own_dns_name_as_its_rendezvous_address_and_prefers_the_stores_absence() -> None:
    pod = render_node_pod(_job(), 1, 0)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_LOCAL_ADDR"] == "llama-1.llama.ml.svc"
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["key"] == LABEL_RENDEZVOUS_STORE
    static = render_node_pod(stored_job(3), 1, 0)
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in static["spec"]["affinity"]["podAntiAffinity"]


def test_the_store_pod() -> None:
    job = _job(env=[{"name": "PYTHONPATH", "value": "/opt/torch"}], podTemplate=VOLUMES)
    pod = render_store_pod(job, 2, image="registry/train@sha256:" + "a" * 64)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "llama-rdzv-a2"
    assert meta["labels"][LABEL_RENDEZVOUS_STORE] == "2" and LABEL_ATTEMPT not in meta["labels"], \
        "never counted by the node pods' one-per-machine term (their job and attempt labels)"
    assert meta["ownerReferences"][0]["uid"] == "uid-123"
    # Resolvable as <job>-rdzv under the job's headless Service, which selects every pod of the job.
    assert (spec["hostname"], spec["subdomain"]) == ("llama-rdzv", "llama")
    assert meta["labels"][LABEL_JOB_NAME] == "llama"
    (container,) = spec["containers"]
    assert container["image"].endswith("a" * 64), "the pinned image, the trainer's torch"
    assert container["command"] == ["python3", "-c", STORE_PROGRAM]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MULTINODE_RENDEZVOUS_STORE_PORT"] == str(rendezvous_port(29500, 2))
    assert env["PYTHONPATH"] == "/opt/torch", "the trainer's environment: torch found as the trainer finds it"
    assert container["ports"][0]["containerPort"] == rendezvous_port(29500, 2)
    assert container["readinessProbe"]["tcpSocket"]["port"] == rendezvous_port(29500, 2)
    # Pod Security restricted, as every pod the operator makes.
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    # The trainer's volumes and pool, and away from training nodes when it can.
    assert spec["volumes"] == VOLUMES["volumes"] and container["volumeMounts"] == VOLUMES["volumeMounts"]
    assert spec["nodeSelector"] == {"pool": "train"}
    term = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {LABEL_JOB_NAME: "llama"}
    assert "requests" in container["resources"] and "gpu" not in str(container["resources"])


def test_the_store_is_required_off_the_machines_named_and_may_share_one_when_none_are() -> None:
    job = _job(podTemplate={"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}})
    off = render_store_pod(job, 0, off_nodes=["gpu-2", "gpu-1"])["spec"]["affinity"]
    (term,) = off["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [node]}
                                    for node in ("gpu-1", "gpu-2")]}, \
        "by name, and only the node selector of the podTemplate carries over (not its affinity)"
    assert "preferredDuringSchedulingIgnoredDuringExecution" in off["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in off["podAntiAffinity"], \
        "a pod anti-affinity would keep a shed node's new pod off the store's machine too"
    shared = render_store_pod(job, 0)["spec"]["affinity"]
    assert "nodeAffinity" not in shared and shared["podAntiAffinity"] == off["podAntiAffinity"]


def test_the_operator_reads_the_store_back_as_no_nodes_pod() -> None:
    pod = render_store_pod(_job(), 0)
    pod["status"] = {"phase": "Running"}
    seen = observe_pod(pod)
    assert seen is not None and seen.rendezvous_store and seen.attempt == 0
    assert not seen.waiting_spare


def test_the_store_program_is_python_that_compiles() -> None:
    compile(STORE_PROGRAM, "<rendezvous store>", "exec")
    assert "multi_tenant=True" in STORE_PROGRAM and "SIGTERM" in STORE_PROGRAM
