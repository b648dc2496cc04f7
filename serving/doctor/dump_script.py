"""`dsv4-serve doctor dump-script`: the kubectl commands that collect what the doctor reads,
for `--from-dump` (a support request attaches the directory). Secrets are never read."""

from __future__ import annotations

from serving.doctor import kinds
from serving.doctor.checks_cluster import MONITORING_CRDS, OPERATOR_SELECTORS

CRDS = ["rayservices.ray.io", "rayclusters.ray.io", *MONITORING_CRDS.values()]
CRDS.append(kinds.CHART_CRDS["HTTPRoute"])


def script(namespace: str, release: str) -> str:
    reviews = []
    for kind, (group, plural) in sorted(kinds.CHART_KINDS.items()):
        verbs = sorted(
            set(kinds.RBAC_VERBS) | (set(kinds.HELM_STORAGE_VERBS) if kind == "Secret" else set())
        )
        for verb in verbs:
            reviews.append(f'  review "$NS" {verb} "{group}" {plural}')
    operators = "\n".join(
        f'kubectl get deployments -A -l {sel} -o yaml > "$DIR/deployments-{i}.yaml"'
        for i, sel in enumerate(OPERATOR_SELECTORS)
    )
    namespaced = [
        "rayservices",
        "rayclusters",
        "jobs",
        "persistentvolumeclaims",
        "resourcequotas",
        "events",
    ]
    per_namespace = "\n".join(
        f'kubectl -n "$NS" get {plural} -o yaml > "$DIR/{plural}.yaml"' for plural in namespaced
    )
    return f"""#!/bin/sh
# Collect what `dsv4-serve doctor` reads into a directory, then:
#   dsv4-serve doctor preflight PRESET -n {namespace} --from-dump DIR
#   dsv4-serve doctor status {release} -n {namespace} --from-dump DIR
# Reads nodes, storage classes, CRDs, the KubeRay operator Deployment, pods, the release's
# objects, events and logs, and asks the API what this account may do. Never Secrets.
set -u
NS={namespace}
RELEASE={release}
DIR=${{1:-dsv4-doctor-dump}}
mkdir -p "$DIR/logs"
date -u +%Y-%m-%dT%H:%M:%SZ > "$DIR/dumped-at"
kubectl version -o yaml > "$DIR/version.yaml"
kubectl get namespace "$NS" -o yaml > "$DIR/namespaces.yaml"
kubectl get nodes -o yaml > "$DIR/nodes.yaml"
kubectl get storageclasses -o yaml > "$DIR/storageclasses.yaml"
kubectl get crd {" ".join(CRDS)} --ignore-not-found -o yaml > "$DIR/customresourcedefinitions.yaml"
{operators}
LIVE=status.phase!=Succeeded,status.phase!=Failed
kubectl get pods -A --field-selector="$LIVE" -o yaml > "$DIR/pods.yaml"
MINE=app.kubernetes.io/instance="$RELEASE"
kubectl -n "$NS" get pods -l "$MINE" -o yaml > "$DIR/release-pods.yaml"
{per_namespace}
NAMES='{{.spec.initContainers[*].name}} {{.spec.containers[*].name}}'
for pod in $(kubectl -n "$NS" get pods -l "$MINE" -o name); do
  pod=${{pod#pod/}}
  mkdir -p "$DIR/logs/$pod"
  for c in $(kubectl -n "$NS" get pod "$pod" -o jsonpath="$NAMES"); do
    out="$DIR/logs/$pod/$c"
    kubectl -n "$NS" logs "$pod" -c "$c" --tail=200 > "$out.log" 2>/dev/null \\
      || rm -f "$out.log"
    kubectl -n "$NS" logs "$pod" -c "$c" --previous --tail=200 > "$out.previous.log" \\
      2>/dev/null || rm -f "$out.previous.log"
  done
done
review() {{
  printf -- '---\\n'
  kubectl create -o yaml -f - <<EOF
apiVersion: authorization.k8s.io/v1
kind: SelfSubjectAccessReview
spec: {{resourceAttributes: {{namespace: "$1", verb: "$2", group: "$3", resource: "$4"}}}}
EOF
}}
{{
{chr(10).join(reviews)}
}} > "$DIR/access-reviews.yaml"
tar czf "$DIR.tar.gz" "$DIR" && echo "wrote $DIR and $DIR.tar.gz"
"""
