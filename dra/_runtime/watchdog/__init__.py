"""The watchdog: what really runs on the node's devices, checked against what each claim was granted.

A preloaded hook holds only the processes that load it; a static binary, another dynamic
loader, a process talking ioctls to the device or a nested container escapes it. The watchdog
looks from below: every `interval` (1 s) it asks the driver for every process on its devices
(`Driver.processes`: host PID, device memory, utilization), finds each one's pod, container and
claim from /proc (`dra._runtime.procinfo`), and gives three verdicts:

- ``unheld``: a process on a device without its claim's hook library mapped, or in none of this
  driver's claims (a host process, another pod, a nested container);
- ``over-quota``: a claim's processes on a device together hold more memory than the claim's
  quota plus `memory_tolerance` per process. The quota is all the memory a claim may hold: the
  hook charges each CUDA context to it (the driver's context size, `dra.Quota.context_memory`),
  so the tolerance only covers the gap between the device's per-process figure and the hook's
  charge (allocation granularity; measured by ``bench/context_gap_h200.py``);
- ``over-share``: a claim's processes used more than its compute share plus `share_tolerance`
  percentage points, averaged over `share_window` seconds (only where the driver reports
  per-process utilization; never for a claim without a compute limit).

Evidence (nothing a tenant can write is trusted: the daemon runs with more privilege than the
processes it judges):

- **Quotas** are the daemon's own: the allocation (the checkpoint record's consumed capacity) and
  the hook settings the daemon wrote for the claim (the record's copy of the claim's read-only
  ``config``), never the claim's ledger, which every process of the claim can write.
- **Claim membership** is by file identity (`procinfo.HooksFs`): a file mount of exactly the
  daemon's ``hooks/<uid>/config`` or ``ledger``; a directory, or a file elsewhere named like it,
  never counts.
- **Held** needs the kernel's word: the claim's hook library mapped executable in the process's
  ``/proc/<pid>/maps`` (CAP_SYS_PTRACE, which the chart grants while the watchdog is on). Where
  the daemon may read maps, that is the only evidence; where its root is also readable, the
  ``ledger`` the process sees must be the claim's file (same device and inode), else it is
  unheld. Without CAP_SYS_PTRACE nothing proves a process held: a live slot in the claim's ledger
  (its ``NStgid`` and start time) is recorded as *registered (unverified)*; it spares the process
  the ``unheld`` verdict (which a process without a slot gets after two polls) and nothing more:
  memory is judged from the device's per-process numbers against the daemon's quota as for any
  process, and the kill takes a process not proven held first.
- **A process the watchdog cannot read** in full (its mountinfo unreadable or past its bound, its
  maps unreadable or past theirs) is judged unheld, never skipped; one whose mounts cannot be read
  counts in the claim its pod's other processes on that device are in (the pod from its cgroup,
  which a container cannot leave). A process whose thread-group leader exited is read through a
  live thread (`procinfo.task_dir`).
- **A claim no hook holds** (its devices hold its shares: a vendor's partition of a device) has the
  daemon's marker instead (`claim_marker`: ``hooks/<uid>/claim``, a read-only file mount), which
  puts a process in it as a hook's files do. Such a process is held on the claim's devices (by the
  device) and judged against the claim's memory; on another device it is unheld. A hookless claim
  prepared by a daemon from before markers has none: while it is on a device, a pod's process
  there in no claim is counted and not judged (said once per claim); a host process still is.
- **The driver's own processes** on a device (`DeviceProcess.system`, e.g. an MPS server) are
  neither judged nor counted in a claim. Only the driver sets that field; nothing read from
  /proc does.

Each verdict is a Warning Event on the pod (the Node for a host process), one structured log
line and metrics; it fires once when its condition starts and again only after it has cleared.
The action (the strongest ``watchdogAction`` of the claim's devices' configs, else the daemon's
``--watchdog``): ``report`` (nothing more), ``kill`` (SIGKILL one offending process through a
pidfd, after re-checking that it is the same process and still in a claim of this driver: a
process in no claim of this driver is never killed), ``taint`` (a NoSchedule taint on the device
until the claim ends, or the process exits when it is in no claim). Every action is logged with
the process, pod and reason.

One idea per module, each importing only those above it in this list:

- `model`: the settings and the records the others pass around (`ClaimView`, `Seen`, `Verdict`);
- `verdicts`: pure functions from what a poll saw to the verdicts it gives (no I/O, no clock);
- `records`: the daemon's checkpoint records read into `ClaimView`s, cached while unchanged;
- `identify`: each device process's pod, container, claim and hold, from /proc and the ledger;
- `metrics`: the Prometheus series;
- `actions`: report, kill (through a pidfd) and taint, with the taints held until they end;
- `events`: verdicts posted as Kubernetes Events (`ApiEvents`);
- `loop`: the `Watchdog` that polls, judges and acts, once (`poll`) or on a thread (`start`).

(pyproject.toml's import contracts hold this order, and keep /proc, ledgers and metrics out of
`verdicts` and `model`.)
"""
