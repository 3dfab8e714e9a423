"""Test helpers shipped with the framework (CDI resolution, kubelet harness).

Import the helper modules directly (kept light: importing `dra.testing` loads nothing):
`dra.testing.kubelet` has `KubeletHarness`, which plays kubelet against a driver's real unix
sockets, and `RecordingHandler`, a fake `ClaimHandler` for tests of the gRPC layer.
"""
