"""`jobtrail topology import`: the topology file built from the fabric's own descriptions.

Each source module reads one format into a `Partial` (what that source knows: nodes and their
NIC links, switches and their uplinks, racks); `merge` lays them over each other (the hand
file first, then `ibnetdiscover`, Slurm's `topology.conf`, Kubernetes node labels) into the
`TopologyFile` that `JOBTRAIL_TOPOLOGY` reads; `changes` compares it with the previous import
and gives what moved as `topology.link` events at their time, never a silent overwrite.
"""
