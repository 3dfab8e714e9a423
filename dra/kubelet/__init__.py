"""Kubelet-facing gRPC servers: plugin registration, DRA v1/v1beta1, DRA health."""
