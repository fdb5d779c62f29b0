"""spec.scheduling: the gang, and which scheduler places it.

Every job is a gang without a spec field: the native scheduling.k8s.io PodGroup where the apiserver serves
it, else the operator keeps no partial gang for long (partialGangTimeoutSeconds). A job can instead name
a gang scheduler the cluster already runs; the operator then creates that scheduler's own PodGroup per
attempt (owned by the job) and joins the pods to it, and creates no native group (two gangs would fight):

- `volcano`: a scheduling.volcano.sh/v1beta1 PodGroup (minMember, queue, priorityClassName); the pods carry
  the annotation scheduling.k8s.io/group-name and schedulerName volcano.
- `coscheduling` (scheduler-plugins): a scheduling.x-k8s.io/v1alpha1 PodGroup (minMember,
  scheduleTimeoutSeconds); the pods carry the label scheduling.x-k8s.io/pod-group and the schedulerName of
  the kube-scheduler that runs the plugin.

Field and key names checked against volcano.sh/apis v1.14.0 (pkg/apis/scheduling/v1beta1) and
sigs.k8s.io/scheduler-plugins v0.34.7 (apis/scheduling/v1alpha1).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from multinode.api.base import DNS1123_SUBDOMAIN_PATTERN, MAX_NAME_LENGTH, ApiModel
from multinode.api.cel import cel_rule, immutable_fields_rules
from multinode.api.constants import DEFAULT_VOLCANO_SCHEDULER

# Volcano's own bound and pattern on spec.queue (a DNS subdomain).
VOLCANO_QUEUE_PATTERN = DNS1123_SUBDOMAIN_PATTERN
SCHEDULER_NAME_PATTERN = VOLCANO_QUEUE_PATTERN


class VolcanoScheduling(ApiModel):
    """Gang-schedule with Volcano."""

    queue: str | None = Field(None, max_length=MAX_NAME_LENGTH, pattern=VOLCANO_QUEUE_PATTERN,
                              description="Volcano Queue the PodGroup is submitted to; Volcano's default "
                                          "(queue default) when unset.")
    scheduler_name: str = Field(DEFAULT_VOLCANO_SCHEDULER, min_length=1, max_length=MAX_NAME_LENGTH,
                                pattern=SCHEDULER_NAME_PATTERN,
                                description="schedulerName of the pods: the name Volcano's scheduler runs as.")


class CoschedulingScheduling(ApiModel):
    """Gang-schedule with the scheduler-plugins coscheduling plugin."""

    scheduler_name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=SCHEDULER_NAME_PATTERN,
                                description="schedulerName of the pods: the kube-scheduler profile that runs the "
                                            "Coscheduling plugin (scheduler-plugins installs it as a second "
                                            "scheduler, scheduler-plugins-scheduler, or as the default one).")
    schedule_timeout_seconds: int | None = Field(
        None, ge=1, le=86400,
        description="The PodGroup's scheduleTimeoutSeconds: how long the plugin holds placed members waiting for "
                    "the rest of the gang; the plugin's own default when unset.")


class SchedulingSpec(ApiModel):
    """Gang scheduling. Every job is a gang without asking: with the native PodGroup API when the apiserver
    serves it, else the operator keeps no partial gang for long. `volcano` or `coscheduling` hands the gang
    to that scheduler instead (the operator creates its PodGroup per attempt)."""

    # Which scheduler gangs the pods is fixed at creation: an attempt's pods must all join one group, and a
    # gang handed from one scheduler to another mid-job would be two gangs fighting over the same pods.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel_rule("!has(self.volcano) || !has(self.coscheduling)",
                 "spec.scheduling: name one gang scheduler, volcano or coscheduling, not both"),
        *immutable_fields_rules(["volcano", "coscheduling"], "spec.scheduling"),
    ]})

    partial_gang_timeout_seconds: int = Field(
        120, ge=1, le=86400,
        description="Only for an attempt that is not ganged (status.scheduling.gang None: the apiserver serves "
                    "no PodGroup, or nativePodGroup is false): an attempt with some pods bound and others "
                    "unschedulable this long releases every pod (the bound ones hold GPUs) and tries again after "
                    "failurePolicy.backoff. Not a restart.")
    # The alpha scheduler's wait for minCount re-queues every waiting member at each arrival: measured here,
    # a 1000-pod gang is bound in 49.6 s against 13.9 s without it, and a 10 000-pod one not in 6 minutes
    # (docs/benchmarks.md). A job that large may rather take the bounded-wait fallback.
    native_pod_group: bool = Field(
        True, description="Gang the job with a native scheduling.k8s.io PodGroup where the apiserver serves it. "
                          "false: pods are bound one by one and partial gangs are released after "
                          "partialGangTimeoutSeconds, as on a cluster without the API (for very large jobs: "
                          "docs/user-guide.md#scheduling). Read when an attempt starts. Not read with volcano or "
                          "coscheduling.")
    volcano: VolcanoScheduling | None = Field(
        None, description="Gang-schedule with Volcano: a scheduling.volcano.sh/v1beta1 PodGroup per attempt "
                          "(minMember numNodes). Immutable.")
    coscheduling: CoschedulingScheduling | None = Field(
        None, description="Gang-schedule with the scheduler-plugins coscheduling plugin: a "
                          "scheduling.x-k8s.io/v1alpha1 PodGroup per attempt (minMember numNodes). Immutable.")
