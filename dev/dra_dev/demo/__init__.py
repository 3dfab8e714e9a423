"""`dra demo`: the claim path end to end on an embedded control plane, with fake devices.

The modules, each importing only those below it (the import contract "Layers of the dev rig"):
  command        the `dra demo` command (entry point ``dra.commands``: demo)
  tour, helm     the tour (`run_demo`: scenario, heterogeneous claim, real node); `--helm`
  scenario, heterogeneous, real_node
                 the parts: a driver's examples/DIR/demo.yaml on fake nodes; one claim across
                 the drivers of examples/heterogeneous/demo.yaml; two claims on a real node
  housekeeping   fake Node objects, clean-up, what is left running
  console        how the demo prints and waits
This file imports none of them, so no part depends on the package.
"""
