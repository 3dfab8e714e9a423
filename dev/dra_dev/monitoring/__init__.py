"""The charts' monitoring against a real Prometheus (built by `dra_dev.cluster.prometheus`).

  prometheus   run one: scrape targets from files (file_sd: changed while it runs), rule files,
               1 s intervals; its HTTP API (instant and range queries, alerts, rules)
  rules        the rule groups and dashboard queries as the charts ship them (helm template)
  picture      a PNG of the dashboard's per-device panels, drawn from the same queries
"""
