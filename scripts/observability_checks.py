#!/usr/bin/env python3
"""Checks of deploy/observability/ that promtool cannot do alone; run by check-observability.sh.

  observability_checks.py tested ALERTS TESTS           every alert fires and stays quiet in a test
  observability_checks.py dashboard-rules DASHBOARD...  the dashboards' queries as recording rules
  observability_checks.py names EXPOSED ALERTS DASHBOARD...
                                                        metrics read but not in EXPOSED (scrapes)
"""

import json
import re
import sys

import yaml

# Grafana's own variables, given values of the kind Grafana gives them, so that a query
# parses as PromQL. A dashboard variable of its own would need a value here too.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}

# Prometheus's own, in no scrape.
EXTERNAL = {"up"}

PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                "group_left", "group_right", "inf", "nan"}


def alerts(path):
    with open(path) as f:
        return [rule for group in yaml.safe_load(f)["groups"] for rule in group["rules"]
                if "alert" in rule]


def dashboard_queries(path):
    """(panel id, refId, expr) of every query, also in panels nested under rows."""
    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    yield panel["id"], target["refId"], target["expr"]
            yield from walk(panel.get("panels", []))
    with open(path) as f:
        yield from walk(json.load(f)["panels"])


def without_grafana_variables(expr):
    def value(match):
        name = match.group(1) or match.group(2)
        if name not in GRAFANA_VARIABLES:
            sys.exit(f"error: unknown Grafana variable ${name} in {expr!r}")
        return GRAFANA_VARIABLES[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def tested(alerts_path, tests_path):
    """Names the alerts lacking a test where they fire, or one where they stay quiet."""
    with open(tests_path) as f:
        cases = [case for test in yaml.safe_load(f)["tests"]
                 for case in test.get("alert_rule_test", [])]
    missing = []
    for rule in alerts(alerts_path):
        own = [case for case in cases if case["alertname"] == rule["alert"]]
        if not any(case.get("exp_alerts") for case in own):
            missing.append(f"{rule['alert']}: no test where it fires")
        if not any(not case.get("exp_alerts") for case in own):
            missing.append(f"{rule['alert']}: no test where it stays quiet")
    return missing


def dashboard_rules(paths):
    rules = [{"record": f"dashboard:panel_{panel}_{ref.lower()}",
              "expr": without_grafana_variables(expr)}
             for path in paths for panel, ref, expr in dashboard_queries(path)]
    return {"groups": [{"name": "dashboard-queries", "rules": rules}]}


def metric_names(expr):
    """The metric names an expression reads (label matchers, ranges, strings and grouping
    lists removed first; what is left and not followed by `(` is a metric name)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", expr):
        if not match.group(2) and match.group(1).lower() not in PROMQL_WORDS:
            names.add(match.group(1))
    return names


def unexposed(exposed_path, alerts_path, dashboard_paths):
    with open(exposed_path) as f:
        exposed = {re.split(r"[{\s]", line, maxsplit=1)[0]
                   for line in f if line.strip() and not line.startswith("#")}
    exprs = [rule["expr"] for rule in alerts(alerts_path)]
    exprs += [without_grafana_variables(expr) for path in dashboard_paths
              for _, _, expr in dashboard_queries(path)]
    read = set().union(*(metric_names(expr) for expr in exprs))
    return sorted(name for name in read if name not in exposed | EXTERNAL)


def main(argv):
    if len(argv) == 3 and argv[0] == "tested":
        problems = tested(argv[1], argv[2])
    elif len(argv) >= 2 and argv[0] == "dashboard-rules":
        json.dump(dashboard_rules(argv[1:]), sys.stdout, indent=2)
        return 0
    elif len(argv) >= 4 and argv[0] == "names":
        problems = [f"{name}: read by an alert or a dashboard, but in no scrape"
                    for name in unexposed(argv[1], argv[2], argv[3:])]
    else:
        sys.exit(__doc__)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
