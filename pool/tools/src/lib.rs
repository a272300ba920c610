//! What the pool's helper apps and load generators share, kept out of the pool library
//! itself:
//!
//! - [`archive`]: the directory format the archiver writes and the librarian serves
//!   (`examples/pool_archiver.rs`, `examples/pool_librarian.rs`);
//! - [`wire`]: a bare, blocking, framed connection to a pool manager, for load generators
//!   (`maestro bench pm`) and protocol tests.

pub mod archive;
pub mod wire;
