"""The node runtime's internals: the daemon, the claim path, publishing, enforcement, kubelet gRPC.

Private to the framework (the leading underscore says so to every outside author; an import
contract says so inside this repository): vendor drivers use the public face in `dra`, and
nothing here is a stable API. Each module is one layer of the contract in pyproject.toml.
"""
