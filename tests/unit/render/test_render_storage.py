"""The shared cache and checkpoint volume on node pods: mounts, the preflight's mkdir, and env paths."""

from __future__ import annotations

from multinode.render import render_node_pod
from multinode.testing import stored_job
from multinode.testing import node_env, preflight_env


def env_of(env: list[dict]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env if "value" in e}


def checkpointed_job(**spec):
    return stored_job(2, cache={"claimName": "team-cache", "mountPath": "/cache"},
                    checkpointing={"claimName": "ckpt", "mountPath": "/checkpoints"}, **spec)


def test_without_cache_no_storage_env_or_volumes() -> None:
    pod = render_node_pod(stored_job(2), 1, 0)
    env = env_of(node_env(stored_job(2), 1, 0))

    assert env["MULTINODE_RESTART_COUNT"] == env["BT_RETRY_COUNT"] == "0"
    assert not {k for k in env if "CACHE" in k or "CHECKPOINT" in k or "RESUME" in k}
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm"]
    assert "--make-dir" not in pod["spec"]["initContainers"][0]["args"]


def test_cache_and_checkpoint_volumes_are_mounted_rw_and_ro() -> None:
    pod = render_node_pod(checkpointed_job(), 0, 0)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}

    assert volumes["multinode-cache"]["persistentVolumeClaim"] == {"claimName": "team-cache"}
    assert volumes["multinode-checkpoints"]["persistentVolumeClaim"] == {"claimName": "ckpt"}
    assert mounts["multinode-cache"] == {"name": "multinode-cache", "mountPath": "/cache"}
    assert mounts["multinode-checkpoints"] == {"name": "multinode-checkpoints", "mountPath": "/checkpoints",
                                               "readOnly": True}
    preflight = pod["spec"]["initContainers"][0]
    # The trainer runs as the image's user (maybe root without capabilities): the dir is everyone's to write.
    assert preflight["args"][-4:] == ["--make-dir", "/cache/llama", "--make-dir-mode", "777"]
    assert [m["name"] for m in preflight["volumeMounts"]] == ["multinode-cache"]


def test_checkpoint_env_under_multinode_and_baseten_names() -> None:
    env = env_of(node_env(checkpointed_job(), 1, 2, restarts=1, resume_from="/checkpoints/llama/checkpoint-300"))

    assert env["MULTINODE_CACHE_DIR"] == env["BT_PROJECT_CACHE_DIR"] == "/cache"
    assert (env["MULTINODE_JOB_CACHE_DIR"] == env["MULTINODE_CHECKPOINT_DIR"] == env["BT_CHECKPOINT_DIR"]
            == "/cache/llama")
    assert env["MULTINODE_MIRROR_DIR"] == "/checkpoints/llama"
    assert env["MULTINODE_RESUME_FROM"] == env["BT_LOAD_CHECKPOINT_DIR"] == "/checkpoints/llama/checkpoint-300"
    assert env["MULTINODE_RESTART_COUNT"] == env["BT_RETRY_COUNT"] == "1"
    assert env["MULTINODE_ATTEMPT"] == "2"
    # The preflight only resolves peers: the resume path is the trainer's business.
    assert "MULTINODE_RESUME_FROM" not in env_of(preflight_env(checkpointed_job(), 1, 2))


def test_first_start_has_an_empty_resume_path() -> None:
    env = env_of(node_env(checkpointed_job(), 0, 0))

    assert env["MULTINODE_RESUME_FROM"] == "" and env["BT_LOAD_CHECKPOINT_DIR"] == ""
