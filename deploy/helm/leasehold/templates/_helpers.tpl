{{/*
Helpers of the leasehold chart. Every name is cut to 63 characters (the limit
of a DNS label and of a label value) without a trailing dash.
*/}}

{{/* The chart name (nameOverride wins). */}}
{{- define "leasehold.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: fullnameOverride, else the release
name when it contains the chart name, else "<release>-<chart>".
*/}}
{{- define "leasehold.fullname" -}}
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

{{/* "<full name>-<suffix>", cut to 63 characters. Call with (list . "suffix"). */}}
{{- define "leasehold.suffixedName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "leasehold.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "leasehold.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pods (never change them on upgrade). */}}
{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The recommended labels, for every object of the chart (without component). */}}
{{- define "leasehold.labels" -}}
helm.sh/chart: {{ include "leasehold.chart" . }}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: leasehold
{{- end }}

{{/* Labels of an object of one component. Call with (list . "component"). */}}
{{- define "leasehold.componentLabels" -}}
{{ include "leasehold.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "leasehold.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The worker ServiceAccount name. */}}
{{- define "leasehold.workerServiceAccountName" -}}
{{- default (include "leasehold.suffixedName" (list . "worker")) .Values.workerServiceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The worker ClusterRole name. */}}
{{- define "leasehold.workerClusterRoleName" -}}
{{- default (include "leasehold.suffixedName" (list . "worker")) .Values.workerClusterRole.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The pool ServiceAccount name (pull-mode workers). */}}
{{- define "leasehold.poolServiceAccountName" -}}
{{- default (include "leasehold.suffixedName" (list . "pool")) .Values.poolServiceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The pool ClusterRole name. */}}
{{- define "leasehold.poolClusterRoleName" -}}
{{- default (include "leasehold.suffixedName" (list . "pool")) .Values.poolClusterRole.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Namespaces that get a worker and a pool ServiceAccount, one per line. */}}
{{- define "leasehold.workerNamespaces" -}}
{{- $namespaces := .Values.workerServiceAccount.namespaces | default .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- range $namespaces }}
{{ . }}
{{- end }}
{{- end }}

{{/*
A ServiceAccount in a worker namespace and its RoleBinding to a ClusterRole.
Call with (dict "root" . "namespace" NS "component" "worker"|"pool" "role"
ROLE "name" NAME "annotations" MAP); renders documents that each start with
"---".
*/}}
{{- define "leasehold.workerIdentity" -}}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "leasehold.componentLabels" (list .root .component) | nindent 4 }}
  {{- with .annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "leasehold.componentLabels" (list .root .component) | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .role }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .namespace }}
{{- end }}

{{/* Whether the operator runs with Kopf peering (HA): "true" or "". */}}
{{- define "leasehold.peering" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end }}
{{- end }}

{{/* The Kopf peering object's name. */}}
{{- define "leasehold.peeringName" -}}
{{- include "leasehold.fullname" . }}
{{- end }}

{{/* The operator image reference. */}}
{{- define "leasehold.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The username the API server gives the operator's service-account tokens. */}}
{{- define "leasehold.operatorUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "leasehold.serviceAccountName" .) }}
{{- end }}

{{/* The operator's rules in a namespace it watches (see rbac.yaml). */}}
{{- define "leasehold.operatorNamespacedRules" -}}
- apiGroups: ["leasehold.dev"]
  resources: ["leasedjobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: ["leasehold.dev"]
  resources: ["leasedjobs/status"]
  verbs: ["get", "patch"]
- apiGroups: ["leasehold.dev"]
  resources: ["leasedjobs/finalizers"]
  verbs: ["update"]
- apiGroups: ["leasehold.dev"]
  resources: ["leasedcronjobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["leasehold.dev"]
  resources: ["leasedcronjobs/status"]
  verbs: ["get", "patch"]
- apiGroups: ["leasehold.dev"]
  resources: ["leasedcronjobs/finalizers"]
  verbs: ["update"]
- apiGroups: ["leasehold.dev"]
  resources: ["jobleases"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["update", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/*
The operator's cluster-scoped reads for Kueue (templates/rbac.yaml): the
objects a Workload's admission names, and the priority classes its priority
comes from.
*/}}
{{- define "leasehold.operatorKueueClusterRules" -}}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors", "clusterqueues", "workloadpriorityclasses"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["get"]
{{- end }}
