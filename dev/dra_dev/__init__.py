"""dra-hami-dev: the development rig, never installed on a node nor in the image.

An embedded control plane (`cluster`), a real kubelet + containerd node (`node`), the demo
(`demo`) and the webhook run locally (`webhook_local`). It adds `dra cluster`, `dra node`,
`dra demo` and `dra webhook up|down` to the runtime's `dra` command through the `dra.commands`
entry-point group. It works from a checkout of the repository (`checkout.ROOT`): the demo reads
`examples/` and `helm/`, the image build reads the `Dockerfile`.
"""
