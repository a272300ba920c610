//! `maestro run`'s launcher as a library, as PRRTE is a library under `prterun`: our own
//! PMIx host that starts the ranks of a job on this node and serves them ([`run`]), the
//! node's directory of publications every launcher and standalone pool manager of the
//! user shares ([`publish`]), the launcher's directory that tools attach through
//! ([`rundir`], [`attach`]), the pool's views it answers PMIx queries with
//! ([`pool_views`]), and the janitor that cleans up after a launcher or pool manager once
//! it is gone ([`janitor`]), and the wrappers of signal calls they share ([`process`]). The `maestro` binary parses the command line and calls in.

pub mod attach;
pub mod janitor;
pub mod pool_views;
pub mod process;
pub mod publish;
pub mod run;
pub mod rundir;
