"""The Kubernetes API client in one place: the only runtime module that imports `kubernetes`.

Everything the node side needs from the official client goes through here (an import contract
keeps it so): building an `ApiClient` from a kubeconfig or the service account, the typed
`ResourceV1Api`, raw JSON GETs (no model objects: a fraction of the CPU, and `CoreV1Api` alone
costs ~20 MiB of RSS), the watch line reader, `ApiException`, and quantity parsing.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes import client as _client
from kubernetes import config as _config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from kubernetes.watch.watch import iter_resp_lines

from dra.errors import UserError

__all__ = [  # noqa: F822 (AdmissionregistrationV1Api comes lazily from __getattr__)
    "AdmissionregistrationV1Api", "ApiClient", "ApiException", "ConfigException", "ResourceV1Api", "api_client",
    "get_json", "get_raw", "iter_resp_lines", "load_incluster_config", "new_client_from_config", "post_json",
    "quantity_decimal", "quantity_to_int"]

ApiClient = _client.ApiClient
ResourceV1Api = _client.ResourceV1Api
ConfigException = _config.ConfigException


def __getattr__(name: str) -> Any:
    # The client loads an API group's models on first access: the node daemon never pays for
    # the admission API the webhook installer uses (~100 model modules, ~6 MiB of RSS).
    if name == "AdmissionregistrationV1Api":
        return _client.AdmissionregistrationV1Api
    raise AttributeError(f"module 'dra._runtime.client' has no attribute {name!r}")


def new_client_from_config(config_file: str | None = None) -> Any:
    """An ApiClient from a kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."""
    return _config.new_client_from_config(config_file=config_file)


def load_incluster_config() -> None:
    """Configure the default client from the pod's service account (ConfigException outside a pod)."""
    _config.load_incluster_config()


def quantity_to_int(value: str | int) -> int:
    """A Kubernetes quantity in integer base units, rounded up ("16Gi" -> 17179869184, "500m" -> 1).

    ValueError past 10^30: "1e999999999" is a valid quantity whose integer takes minutes to build."""
    exact: Decimal = parse_quantity(value)
    if not exact.is_finite() or exact.adjusted() > 30:
        raise ValueError(f"quantity {str(value)[:40]!r} is beyond 10^30")
    return math.ceil(exact)


def quantity_decimal(value: object) -> Decimal:
    """A Kubernetes quantity exactly (ValueError, TypeError or ArithmeticError when it is not one)."""
    return Decimal(parse_quantity(value))


def api_client(kubeconfig: Path | None, pool_size: int = 8) -> Any:
    """A client from `kubeconfig`, or from the pod's service account when None; UserError when
    neither works."""
    cfg = _client.Configuration()
    try:
        if kubeconfig is not None:
            _config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        else:
            _config.load_incluster_config(client_configuration=cfg)
    except _config.ConfigException as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        hint = "" if kubeconfig else " Outside a cluster, pass --kubeconfig."
        raise UserError(f"Cannot configure the Kubernetes client from {where}: {exc}.{hint}") from exc
    except OSError as exc:
        raise UserError(f"Cannot read kubeconfig {kubeconfig}: {exc}") from exc
    cfg.connection_pool_maxsize = pool_size  # concurrent claim GETs share the pool
    return _client.ApiClient(cfg)


def cli_client(kubeconfig: Path | None) -> Any:
    """A command's client: `kubeconfig` when given, else the pod's service account, else the
    default kubeconfig ($KUBECONFIG or ~/.kube/config); UserError when none works."""
    if kubeconfig is not None:
        return api_client(kubeconfig)
    try:
        load_incluster_config()
        return _client.ApiClient()
    except _config.ConfigException:
        try:
            return new_client_from_config()
        except (_config.ConfigException, OSError) as e:
            raise UserError(f"no cluster to talk to: not in a pod and no kubeconfig ({e}); pass --kubeconfig") from None


def get_raw(api: Any, path: str, path_params: dict[str, str], timeout: float,
            query: list[tuple[str, str]] | None = None, method: str = "GET", body: Any = None) -> Any:
    """GET `path` (e.g. ``/api/v1/nodes/{name}``) through the client's generic call; the read
    urllib3 response (connection back in the pool). Raises ApiException on a non-2xx status.
    `query`: query parameters; `method` and `body`: another verb with a JSON body."""
    headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if body is not None else {})}
    request = api.param_serialize(method=method, resource_path=path, path_params=path_params, query_params=query,
                                  header_params=headers, body=body, auth_settings=["BearerToken"])
    response = api.call_api(*request, _request_timeout=timeout)
    try:
        response.read()
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response


def get_json(api: Any, path: str, path_params: dict[str, str], timeout: float,
             query: list[tuple[str, str]] | None = None) -> dict[str, Any] | None:
    """The JSON object at `path`, or None when the server answers 404."""
    try:
        response = get_raw(api, path, path_params, timeout, query)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    doc: dict[str, Any] = json.loads(response.data or b"{}")
    return doc


def post_json(api: Any, path: str, path_params: dict[str, str], body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST the JSON object `body` to `path` (e.g. an Event); the created object. ApiException on
    a non-2xx status."""
    response = get_raw(api, path, path_params, timeout, method="POST", body=body)
    doc: dict[str, Any] = json.loads(response.data or b"{}")
    return doc
