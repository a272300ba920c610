//! The CDO pool (issues #5 and #6, not implemented yet).
//!
//! This crate will own: the sans-IO core (CDO and application state machines, the pool
//! manager's bookkeeping, protocol messages, selectors), the tokio drivers of the pool
//! manager and the client, transport planning and pool events. It exports nothing yet.
