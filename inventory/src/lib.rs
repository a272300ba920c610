//! The node's fabric inventory (issue #3, not implemented yet).
//!
//! This crate will own: one `Inventory` model built from hwloc, libfabric and PMIx (NICs,
//! their PCI/NUMA locality, providers, link state), the nearest-NIC choice for a cpuset,
//! and the JSON and Slurm exporters. It exports nothing yet.
