//! What the pool's helper apps and load generators share, kept out of the pool library
//! itself:
//!
//! - [`cli`]: the value parsers of `maestro`'s command lines, with messages that say what
//!   to give, and how a failed subcommand reports;
//! - [`archive`]: the directory format the archiver writes and the librarian serves
//!   (`examples/pool_archiver.rs`, `examples/pool_librarian.rs`);
//! - [`progress`]: progress of long work on stderr, a bar on a terminal and a line every
//!   few seconds in a log (`maestro bench`, `examples/pool_workflow.rs`);
//! - [`render`]: the pool's views as text (`maestro pool`, `maestro query`);
//! - [`selector`]: selectors typed by the environment's schemas;
//! - [`size`]: sizes as command lines take them (`64K`, `4G`);
//! - [`wire`]: a bare, blocking, framed connection to a pool manager, for load generators
//!   (`maestro bench pm`) and protocol tests.

pub mod archive;
pub mod cli;
pub mod progress;
pub mod render;
pub mod selector;
pub mod size;
pub mod wire;
