"""Test helpers shipped with the framework (CDI resolution, kubelet harness)."""
