"""`dra top`: each node's devices, the claims and pods on each, what they asked for and what they
use, and the watchdog's verdicts, refreshed like `top` (or once, as JSON for scripts).

Three sources, each read as it is:

- the API: ResourceSlices (a node's devices and their capacity: `memory`, `cores`), and
  ResourceClaims (their allocation: device, pool and the capacity each result consumed, the
  requested memory and cores; `reservedFor`: the pods using each);
- the node daemons' ``/metrics``: per claim and device the hook ledger's memory in use, its peak,
  its quota and compute share, its processes and the device time the compute limiter charged it
  (`dra._runtime.ledger_metrics`; its rate between two scrapes is the compute the claim used);
  the watchdog's gauges (a device's processes, unheld and unverified; a claim's memory over its
  quota and compute over its share) and its verdict counters (`dra._runtime.watchdog.metrics`).

The daemons' endpoints: the chart's daemon pods (label app.kubernetes.io/component=kubelet-plugin,
their port named ``metrics``), reached through the API server's pod proxy (needs get on
pods/proxy) or directly at the pod's IP (``--metrics-via direct``, from inside the cluster); or
named one by one, ``--metrics NODE=URL``, for daemons run as local processes (the demo).

Modules: `metrics` parses an exposition, `model` joins the three into one snapshot (pure: no I/O,
the clock passed in), `view` draws it with rich, `sources` reads the API and the endpoints, and
`command` is the typer command.
"""
