"""`dra webhook run|manifests` (the dev rig, dra-hami-dev, adds `up` and `down`).

`run` is what a Deployment runs (flags kept few and plain for the Helm chart):

    dra webhook run --cert /tls/tls.crt --key /tls/tls.key [--port 8443] [--health-port 8081]
                    [--config /etc/dra-webhook/vendors.yaml] [--kubeconfig FILE]
                    [--client-ca /client-ca/ca.crt] [--allow-claim-loosening] [--max-shapes-per-pod 32]
                    [--unannotated-modes nvidia=hami-core,mig]

Without --kubeconfig it uses the pod's service account (in-cluster config), else $KUBECONFIG or
~/.kube/config. It needs get/list/watch on resourceslices, get on deviceclasses, create/get on
resourceclaimtemplates, create on events and get on replicasets (a converted pod's warnings as
Events on its controller and a ReplicaSet's Deployment: `events`) and list on resourcequotas (the
warning that conversion bypasses a quota on HAMi's resources: `quota`). Probes: GET /healthz
(alive) and /readyz (device inventory synced) on the health port, plain HTTP, which also serves
Prometheus /metrics.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from dra._runtime import registry
from dra.errors import UserError

app = typer.Typer(help="The admission webhook: HAMi-style pod limits become DRA claims.", no_args_is_help=True)

_ConfigOpt = Annotated[Path | None, typer.Option("--config", help="vendor mapping file (default: the shipped one)")]



@app.command()
def run(
    cert: Annotated[Path, typer.Option(help="serving certificate (PEM); re-read when it changes")],
    key: Annotated[Path, typer.Option(help="its private key (PEM)")],
    port: Annotated[int, typer.Option(help="HTTPS port for /mutate and /validate")] = 8443,
    host: Annotated[str, typer.Option(help="address to listen on")] = "0.0.0.0",
    health_port: Annotated[int, typer.Option(help="plain-HTTP port for /healthz and /readyz (0: none)")] = 8081,
    config: _ConfigOpt = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="default: in-cluster, then $KUBECONFIG")] = None,
    log_format: Annotated[str, typer.Option(help="json or text")] = "json",
    log_level: Annotated[str, typer.Option()] = "info",
    client_ca: Annotated[Path | None, typer.Option(
        help="CA bundle (PEM) of the API server's client certificate: then only callers with a certificate it"
             " signed reach /mutate and /validate")] = None,
    allow_claim_loosening: Annotated[bool, typer.Option(
        help="admit claims whose own config loosens enforcement below their DeviceClass's (as the daemons'"
             " --allow-claim-loosening)")] = False,
    max_shapes_per_pod: Annotated[int, typer.Option(
        min=1, help="distinct device requests (one ResourceClaimTemplate each) one pod may ask for; past it the pod"
                    " is refused before any template is created")] = 32,
    unannotated_modes: Annotated[list[str] | None, typer.Option(
        help="VENDOR=MODE[,MODE...]: the modes a pod without the vendor's mode annotation may land on, in order"
             " (each a firstAvailable alternative; replaces the mapping's mode.unannotated, VENDOR= turns it off),"
             " e.g. nvidia=hami-core,mig for HAMi's one pool of shared and MIG GPUs; each mode's DeviceClass must"
             " exist")] = None,
) -> None:
    """Serve the webhook until SIGTERM."""
    import logging

    from dra._runtime import client
    from dra._runtime.logging import setup
    from dra.webhook import vendors
    from dra.webhook.classes import DeviceClassReader
    from dra.webhook.events import OwnerEvents
    from dra.webhook.inventory import SliceInventory
    from dra.webhook.quota import QuotaReader
    from dra.webhook.review import Admission
    from dra.webhook.server import WebhookServer
    from dra.webhook.templates import TemplateStore

    setup(log_format, log_level)
    log = logging.getLogger("dra.webhook")
    mapping = vendors.with_unannotated(vendors.load(config), unannotated_modes or [])
    for p in (cert, key):
        if not p.is_file():
            raise UserError(f"{p} does not exist; pass the serving certificate and key with --cert and --key")
    if client_ca is not None and not client_ca.is_file():
        raise UserError(f"--client-ca {client_ca} does not exist; pass the CA that signs the API server's client"
                        " certificate for webhooks")
    api = client.cli_client(kubeconfig)
    inventory = SliceInventory(api)
    own = os.environ.get("POD_NAMESPACE", "")
    events = OwnerEvents(lambda path, params: client.get_json(api, path, params, 5),
                         lambda path, params, body: client.post_json(api, path, params, body, 5))
    admission = Admission(mapping, inventory, TemplateStore(api), classes=DeviceClassReader(api),
                          allow_claim_loosening=allow_claim_loosening,
                          protected_namespaces=["kube-system", *([own] if own else [])],
                          max_shapes_per_pod=max_shapes_per_pod, events=events,
                          quotas=QuotaReader(lambda path, params: client.get_json(api, path, params, 2)))
    try:
        server = WebhookServer(admission, cert, key, port=port, host=host,
                               health_port=health_port or None, ready=lambda: inventory.ready, client_ca=client_ca)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port} or :{health_port}: {e.strerror}; pick free ports") from None
    server.metrics.track_inventory(inventory.device_counts)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    inventory.start()
    events.start()
    server.start()
    log.info("webhook serving", extra={"port": server.port, "health_port": server.health_port,
                                       "vendors": [v.name for v in mapping.vendors], "config": mapping.source,
                                       "unannotated_modes": {v.name: list(v.mode.unannotated) for v in mapping.vendors
                                                             if v.mode is not None and v.mode.unannotated},
                                       "drivers_checked": sorted(admission.drivers)})
    stop.wait()
    log.info("webhook stopping")
    server.stop()
    events.close()
    inventory.stop()
    log.info("webhook stopped")


@app.command()
def manifests(
    ca_bundle: Annotated[Path, typer.Option(help="PEM of the CA that signed the serving certificate")],
    url: Annotated[str | None, typer.Option(help="https://HOST:PORT the API server reaches")] = None,
    service: Annotated[str | None, typer.Option(help="NAMESPACE/NAME:PORT of the webhook's Service")] = None,
    config: _ConfigOpt = None,
    failure_policy: Annotated[str, typer.Option()] = "Fail",
    namespace: Annotated[str, typer.Option(help="the webhook's own namespace (never served)")] = "dra-system",
) -> None:
    """Print the two webhook configurations as YAML (for charts and GitOps)."""
    import base64

    import yaml

    from dra.webhook import registration, vendors

    svc = None
    if service is not None:
        try:
            ns_name, port_text = service.rsplit(":", 1)
            ns, name = ns_name.split("/", 1)
            svc = (ns, name, int(port_text))
        except ValueError:
            raise UserError(f"--service must be NAMESPACE/NAME:PORT, not {service!r}") from None
    try:
        objs = registration.configurations(
            vendors.load(config), base64.b64encode(ca_bundle.read_bytes()).decode(), url=url, service=svc,
            namespace=namespace, failure_policy=failure_policy, drivers=sorted(registry.driver_classes()))
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    typer.echo(yaml.safe_dump_all(objs, sort_keys=False), nl=False)
