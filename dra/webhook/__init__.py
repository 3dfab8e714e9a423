"""The admission webhook: HAMi-style pod limits become DRA claims, with nothing leaked.

A pod that asks for ``nvidia.com/gpu: 1, nvidia.com/gpumem: 3000, nvidia.com/gpucores: 30``
(or an Ascend ``huawei.com/Ascend910B3`` share) is rewritten at admission to reference a
ResourceClaimTemplate, one per distinct request shape in the pod's namespace. Kubernetes' own
resourceclaim controller then creates one claim per pod, owned by the pod, and deletes it with
the pod: the webhook creates nothing per pod, so nothing can leak on rollouts.

- `vendors`: the vendor mapping (data: resource names, DeviceClass, units, annotations).
- `selectors`: HAMi's annotations as CEL selectors.
- `translate`: one pod's limits as DRA requests (pure; table-tested), with `shares` (the values),
  `knobs` (HAMi's pod-level inputs) and `claimspec` (templates and the pod's patch).
- `checks`: the validating side for ResourceClaims and ResourceClaimTemplates.
- `inventory`: a watch-backed view of the published devices (the largest memory, the sizes).
- `review`: AdmissionReview v1 in and out; `templates`: idempotent template creation;
  `events`: warnings as Events on the pod's owner; `quota`: quotas conversion bypasses.
- `server`: HTTPS serving; `install`: `dra webhook up|down`; `cli`: the commands.
"""
