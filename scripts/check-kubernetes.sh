#!/usr/bin/env bash
# Checks the Kubernetes manifests offline, as they are (no cluster, no rendering step):
#
#   scripts/check-kubernetes.sh
#
# 1. kubernetes-validate (strict: unknown fields are errors) against the Kubernetes version
#    the manifests target, KUBERNETES_VERSION (default 1.30.0);
# 2. what a schema cannot see: every variable of the configuration table (the "Variables"
#    section of docs/configuration.md) is set for each service that reads it (a ConfigMap the
#    container takes with envFrom, or an env entry, such as a Secret reference), and the
#    termination grace period outlasts the drain plus a request timeout, so the kubelet's
#    SIGKILL never cuts a graceful shutdown.
#
# Needs: python3 with PyYAML, kubernetes-validate (pip install kubernetes-validate).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.30.0}"

kubernetes-validate --strict --quiet -k "$KUBERNETES_VERSION" \
  deploy/kubernetes/*.yaml deploy/kubernetes/examples/*.yaml
echo "schemas: valid for Kubernetes $KUBERNETES_VERSION"

python3 - <<'PY'
import glob
import re
import sys

import yaml

SERVICES = ("order-service", "inventory-service")

docs = [d for f in sorted(glob.glob("deploy/kubernetes/*.yaml")) for d in yaml.safe_load_all(open(f)) if d]
config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}

# The configuration table, docs/configuration.md's section "Variables":
# | `VAR` (/ `VAR`) | order-service | inventory-service | meaning |
wanted = {service: set() for service in SERVICES}
document = open("docs/configuration.md").read()
if "\n## Variables\n" not in document:
    sys.exit('docs/configuration.md has no "## Variables" section holding the configuration table')
table = document.split("\n## Variables\n", 1)[1].split("\n## ", 1)[0]
for row in table.splitlines():
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    if len(cells) < 4 or not cells[0].startswith("`"):
        continue
    for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
        for service, default in zip(SERVICES, cells[1:3]):
            if default != "–":
                wanted[service].add(name)

# A table that moved or changed shape would otherwise pass by checking nothing.
if not all(wanted.values()):
    sys.exit("docs/configuration.md's table names no variable for some service; has its format changed?")

failures = []
for service in SERVICES:
    deployment = deployments.get(service)
    if deployment is None:
        failures.append(f"no Deployment named {service}")
        continue
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    values = {}
    for source in container.get("envFrom", []):
        values.update(config_maps.get(source["configMapRef"]["name"], {}))
    for entry in container.get("env", []):
        values[entry["name"]] = entry.get("value", "<from a reference>")
    for name in sorted(wanted[service] - values.keys()):
        failures.append(f"{service}: {name} is in docs/configuration.md's table but not set")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    floor = int(values.get("SHUTDOWN_DRAIN_SECS", 0)) + int(values.get("REQUEST_TIMEOUT_SECS", 10))
    if grace <= floor:
        failures.append(
            f"{service}: terminationGracePeriodSeconds {grace} must exceed the drain plus a "
            f"request timeout ({floor} s)"
        )

for failure in failures:
    print(failure, file=sys.stderr)
if failures:
    sys.exit(1)
print("settings: every configured variable is set for each service; grace periods outlast the drain")
PY
