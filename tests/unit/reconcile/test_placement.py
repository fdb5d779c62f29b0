"""One topology domain per attempt (placement.py)."""

from __future__ import annotations

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.reconcile.decision import Decision
from multinode.reconcile.placement import ObservedNode, attempt_node_selector
from tests.unit.reconcile.planning import condition, run
from multinode.testing import stored_job


def nodes(domains: dict[str, int], gpus: int = 8) -> tuple[ObservedNode, ...]:
    out = []
    for domain, count in domains.items():
        for i in range(count):
            out.append(ObservedNode(name=f"{domain}-{i}", labels={"block": domain, "nvidia.com/gpu.product": "H100"},
                                    allocatable={"nvidia.com/gpu": str(gpus)}))
    return tuple(out)


def test_topology_picks_the_domain_with_the_most_eligible_nodes_and_pins_it() -> None:
    job = stored_job(3, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    result = run(job, [], nodes=nodes({"block-0": 2, "block-1": 4, "block-2": 3}))

    assert result.status.topology_domain == "block-1"
    assert {p["spec"]["nodeSelector"]["block"] for p in result.pods_to_create} == {"block-1"}


def test_topology_without_a_big_enough_domain_says_so() -> None:
    job = stored_job(4, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    result = run(job, [], nodes=nodes({"block-0": 3, "block-1": 2}))

    assert result.pods_to_create == [] and result.status.phase == Phase.PENDING
    cond = condition(result.status, "Running")
    assert cond.reason == "NoTopologyDomain"
    assert cond.message == "no block domain has 4 eligible nodes (largest: block-0 with 3)"


def test_excluded_nodes_do_not_count_toward_a_domain() -> None:
    from multinode.api import TrainingJobStatus
    from multinode.reconcile.exclusion import exclude_node
    from tests.unit.reconcile.planning import NOW

    job = stored_job(3, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    excluded: list = []
    for name in ("block-1-0", "block-1-1"):
        _, excluded = exclude_node(excluded, name, "GPUsNotVisible", "", now=NOW, seconds=600)
    previous = TrainingJobStatus(excluded_nodes=excluded)
    result = run(job, [], previous=previous, nodes=nodes({"block-1": 4, "block-2": 3}))

    assert result.status.topology_domain == "block-2"


@pytest.mark.parametrize(("topology", "kept", "cluster", "selector", "domain", "blocked"), [
    (None, None, nodes({"block-0": 3}), None, None, False),                              # no topology: no selector
    ({"sameDomainLabel": "block"}, "block-9", {}, {"block": "block-9"}, None, False),     # chosen once, kept
    ({"sameDomainLabel": "block"}, None, nodes({"block-0": 3, "block-1": 2}), {"block": "block-0"}, "block-0",
     False),
    ({"sameDomainLabel": "block"}, None, nodes({"block-0": 1}), None, None, True),        # no domain fits
])
def test_the_attempts_domain_is_chosen_once(topology, kept, cluster, selector, domain, blocked) -> None:
    spec = {"topology": topology} if topology else {}
    chosen, decided = attempt_node_selector(stored_job(2, resourcesPerNode={"gpus": 8}, **spec),
                                            TrainingJobStatus(topology_domain=kept), cluster)
    assert chosen == selector
    assert decided.status.get("topology_domain") == domain
    assert (decided.verdict is not None) == blocked
    if not blocked and domain is None:
        assert decided == Decision()
