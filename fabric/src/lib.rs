//! libfabric for the Maestro pool (issue #4, not implemented yet).
//!
//! This crate will own: provider discovery and ranking by capability, RDM endpoints with
//! address vectors and completion queues driven by a progress thread, memory registration,
//! RMA read/write, tagged messages, and serialisable endpoint addresses and memory
//! descriptors for transport tickets. It exports nothing yet.
