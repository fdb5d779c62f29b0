{{/* Names, labels, the image reference and the RBAC rules, shared by the templates. */}}

{{- define "multinode-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "multinode-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "multinode-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "multinode-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "multinode-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "multinode-operator.labels" -}}
helm.sh/chart: {{ include "multinode-operator.chart" . }}
{{ include "multinode-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: multinode
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "multinode-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "multinode-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is given (it wins), else repository:tag (tag defaults to appVersion). */}}
{{- define "multinode-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The operator's rights on namespaced resources: exactly its API calls (operator/multinode/controller).
- trainingjobs: list/watch (the operator's watch feeds its index, a periodic re-list checks it; the
  operator never GETs one), delete
  (ttlSecondsAfterFinished), patch (spec.suspend only, for jobs queued in Kueue: started when Kueue
  admits their Workload, stopped when it evicts it).
- trainingjobs/status: patch (the operator's status); get as well, because the operator grants the
  mirror Role get+patch on it and the apiserver lets a Role be created only by someone who holds
  its rights (RBAC escalation check).
- pods: list/watch (index), create and delete (gang creation, restarts, cleanup).
- services: list/watch (index), create (the headless Service).
- configmaps: create and delete (each attempt's shared env, read by its pods through envFrom; the
  previous attempt's is deleted when the next starts).
- serviceaccounts, roles, rolebindings: create (each checkpointed job's mirror identity).
- get on every kind the operator creates for a job (pods, services, configmaps, serviceaccounts, roles,
  rolebindings, podgroups, workloads): only after a create is refused because the name is taken (409),
  to read whether the object there is the job's own before counting it as made (controller/ownership.py);
  an object the job does not own is never used. For configmaps, serviceaccounts, roles and rolebindings
  this is the only read (no list, no watch).
- events: create (phase changes; kopf's warnings).
- workloads (kueue.x-k8s.io): list/watch (index), create and delete (one per queued job);
  workloads/status: patch (Finished when the job ends, the admission cleared after an eviction).
No update of anything but the jobs' status; patch only of the jobs' status, spec.suspend and Kueue
Workloads' status; never secrets.
tests/integration/chart runs a job end to end under exactly these rules.
*/}}
{{- define "multinode-operator.namespacedRules" -}}
- apiGroups: ["multinode.dev"]
  resources: ["trainingjobs"]
  verbs: ["list", "watch", "delete", "patch"]
- apiGroups: ["multinode.dev"]
  resources: ["trainingjobs/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
{{- /* Hang detection reads the trainers' logs (only of jobs with spec.hangDetection). */}}
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- /* Native gang scheduling (Kubernetes 1.36 alpha): one PodGroup per attempt, when the apiserver serves it. */}}
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch", "create", "delete"]
{{- /* spec.scheduling.volcano / coscheduling: that scheduler's PodGroup per attempt; earlier ones listed by the job's label and deleted (not watched). */}}
- apiGroups: ["scheduling.volcano.sh", "scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "create", "delete"]
{{- /* Kueue: a Workload per job with the label kueue.x-k8s.io/queue-name; its status when the job ends or is evicted. */}}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- if .Values.rbac.ownerReferencesPermissionEnforcement }}
- apiGroups: ["multinode.dev"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
{{- end }}
{{- end }}

{{/* Cluster-scoped: nodes, for spec.topology placement (the operator indexes every node). */}}
{{- define "multinode-operator.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- /* Kueue: the admitted flavors' nodeLabels select the pods' nodes; a Workload's priority is its PriorityClass' value. */}}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors"]
  verbs: ["list", "watch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["get"]
{{- end }}

{{- define "multinode-operator.crdMetadata" -}}
metadata:
  name: trainingjobs.multinode.dev
  labels:
    {{- include "multinode-operator.labels" . | nindent 4 }}
  {{- if .Values.crds.keep }}
  annotations:
    helm.sh/resource-policy: keep
  {{- end }}
{{- end }}
