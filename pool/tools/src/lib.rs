//! What the pool's helper apps and load generators share, kept out of the pool library
//! itself:
//!
//! - [`archive`]: the directory format the archiver writes and the librarian serves
//!   (`examples/pool_archiver.rs`, `examples/pool_librarian.rs`);
//! - [`progress`]: progress of long work on stderr, a bar on a terminal and a line every
//!   few seconds in a log (`maestro bench`, `examples/pool_workflow.rs`);
//! - [`size`]: sizes as command lines take them (`64K`, `4G`);
//! - [`wire`]: a bare, blocking, framed connection to a pool manager, for load generators
//!   (`maestro bench pm`) and protocol tests.

pub mod archive;
pub mod progress;
pub mod size;
pub mod wire;
