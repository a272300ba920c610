//! The one-per-process PMIx role.
//!
//! OpenPMIx keeps global state: a process is a client, a server or a tool, initialised once.
//! [`claim`] records which role holds the library so that a second `Client::init`,
//! `Server::init` or `Tool::connect` in the same process fails with
//! [`Error::AlreadyInitialized`] instead of corrupting PMIx.

use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::sync::lock;

static ROLE: Mutex<Option<&'static str>> = Mutex::new(None);

/// Claims PMIx for `role`; fails if any role (including a finalised one) held it before.
pub(crate) fn claim(role: &'static str) -> Result<()> {
    let mut held = lock(&ROLE);
    if let Some(other) = *held {
        return Err(Error::AlreadyInitialized(other));
    }
    *held = Some(role);
    Ok(())
}

/// Gives the claim back after a failed initialisation, so the caller may try again.
pub(crate) fn release_failed() {
    *lock(&ROLE) = None;
}

/// The role that holds PMIx in this process, if any.
pub(crate) fn role() -> Option<&'static str> {
    *lock(&ROLE)
}
