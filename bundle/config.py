"""The facts the rules and the dashboards must agree on; `RulesConfig` and `DashboardConfig` default to them."""

from __future__ import annotations

# How Prometheus scrapes trainmon: the label matchers of its targets. Change it when your scrape job has
# another name (`python -m bundle --selector`).
SELECTOR = 'job="trainmon"'
# SM activity below this on a GPU is idle (NCCL spin kernels stay near 0 here): the idle alert and the fleet
# dashboard's idle count use the same.
IDLE_SM_RATIO = 0.05
