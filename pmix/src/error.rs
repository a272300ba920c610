//! Errors of the safe PMIx layer.
//!
//! Every PMIx call returns a `pmix_status_t`. [`Status`] keeps the raw code (so a caller can
//! still compare against the standard's constants) and prints PMIx's own text for it.
//! [`Error`] sorts the codes a caller must react to differently into their own variants: a
//! capability the host lacks ([`Error::NotSupported`]), a wait that ran out
//! ([`Error::Timeout`]), a key nobody put ([`Error::NotFound`]), a host that is not there
//! ([`Error::Unreachable`]); everything else is [`Error::Pmix`].

use std::ffi::CStr;
use std::fmt;

use pmix_sys as sys;

/// A raw PMIx status code (`pmix_status_t`), printed with `PMIx_Error_string`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

impl Status {
    /// `PMIX_SUCCESS`.
    pub const SUCCESS: Status = Status(sys::PMIX_SUCCESS as i32);
    /// `PMIX_ERROR`: a failure with no more specific status.
    pub const ERROR: Status = Status(sys::PMIX_ERROR);
    /// `PMIX_ERR_PROC_ABORTED`: a process of the job aborted.
    pub const PROC_ABORTED: Status = Status(sys::PMIX_ERR_PROC_ABORTED);
    /// `PMIX_ERR_PROC_ABORTED_BY_SIG`: a process of the job was killed by a signal.
    pub const PROC_ABORTED_BY_SIG: Status = Status(sys::PMIX_ERR_PROC_ABORTED_BY_SIG);
    /// `PMIX_ERR_PROC_TERM_WO_SYNC`: a process exited without calling finalize.
    pub const PROC_TERM_WO_SYNC: Status = Status(sys::PMIX_ERR_PROC_TERM_WO_SYNC);
    /// `PMIX_ERR_NODE_DOWN`.
    pub const NODE_DOWN: Status = Status(sys::PMIX_ERR_NODE_DOWN);
    /// `PMIX_ERR_LOST_CONNECTION`.
    pub const LOST_CONNECTION: Status = Status(sys::PMIX_ERR_LOST_CONNECTION);
    /// `PMIX_FABRIC_UPDATED`: the fabric changed; re-read fabric information.
    pub const FABRIC_UPDATED: Status = Status(sys::PMIX_FABRIC_UPDATED);
    /// `PMIX_ERR_NOT_FOUND`.
    pub const NOT_FOUND: Status = Status(sys::PMIX_ERR_NOT_FOUND);
    /// `PMIX_ERR_NOT_SUPPORTED`.
    pub const NOT_SUPPORTED: Status = Status(sys::PMIX_ERR_NOT_SUPPORTED);
    /// `PMIX_ERR_PARTIAL_SUCCESS`: some of the request was answered.
    pub const PARTIAL_SUCCESS: Status = Status(sys::PMIX_ERR_PARTIAL_SUCCESS);
    /// `PMIX_ERR_INVALID_CRED`: a credential failed validation.
    pub const INVALID_CRED: Status = Status(sys::PMIX_ERR_INVALID_CRED);
    /// `PMIX_ERR_TIMEOUT`.
    pub const TIMEOUT: Status = Status(sys::PMIX_ERR_TIMEOUT);
    /// `PMIX_GROUP_MEMBER_FAILED`: a member of a group the recipient belongs to died.
    pub const GROUP_MEMBER_FAILED: Status = Status(sys::PMIX_GROUP_MEMBER_FAILED);
    /// `PMIX_EXISTS`: the thing to create exists already.
    pub const EXISTS: Status = Status(sys::PMIX_EXISTS);
    /// `PMIX_ERR_NO_PERMISSIONS`: the requester may not do this (e.g. another user).
    pub const NO_PERMISSIONS: Status = Status(sys::PMIX_ERR_NO_PERMISSIONS);
    /// `PMIX_ERR_DUPLICATE_KEY`: another process already published the key.
    pub const DUPLICATE_KEY: Status = Status(sys::PMIX_ERR_DUPLICATE_KEY);
    /// `PMIX_ERR_BAD_PARAM`: a request that is malformed.
    pub const BAD_PARAM: Status = Status(sys::PMIX_ERR_BAD_PARAM);
    /// `PMIX_ERR_SERVER_FAILED_REQUEST`: the host refused a request it does not serve
    /// (Slurm's stepd, asked to register an event handler).
    pub const SERVER_FAILED_REQUEST: Status = Status(sys::PMIX_ERR_SERVER_FAILED_REQUEST);
    /// `PMIX_ERR_JOB_FAILED_TO_LAUNCH`: a spawned job that could not start.
    pub const JOB_FAILED_TO_LAUNCH: Status = Status(sys::PMIX_ERR_JOB_FAILED_TO_LAUNCH);
    /// `PMIX_EVENT_JOB_END`: a job ended (an event code).
    pub const JOB_END: Status = Status(sys::PMIX_EVENT_JOB_END);
    /// `PMIX_ERR_JOB_TERMINATED`: the job has ended.
    pub const JOB_TERMINATED: Status = Status(sys::PMIX_ERR_JOB_TERMINATED);
    /// `PMIX_EXTERNAL_ERR_BASE`: codes below this are free for applications.
    pub const EXTERNAL_BASE: i32 = sys::PMIX_EXTERNAL_ERR_BASE;

    /// An application-defined event code, `PMIX_EXTERNAL_ERR_BASE - offset`.
    pub const fn user(offset: i32) -> Status {
        Status(Self::EXTERNAL_BASE - offset)
    }

    /// True for `PMIX_SUCCESS`.
    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: PMIx_Error_string returns a pointer to a static string for any code.
        let s = unsafe { sys::PMIx_Error_string(self.0) };
        if s.is_null() {
            write!(f, "PMIx status {}", self.0)
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            let text = unsafe { CStr::from_ptr(s) }.to_string_lossy();
            write!(f, "{text} ({})", self.0)
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What can go wrong in a PMIx call. `op` names the PMIx function that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The PMIx host does not implement this operation (Slurm's stepd has no
    /// publish/lookup, credentials or query, for example). Degrade or use another path.
    #[error(
        "{op}: not supported by this PMIx host; use a host that offers it (maestro run does) or a fallback"
    )]
    NotSupported {
        /// The PMIx function.
        op: &'static str,
    },
    /// The operation did not complete within its timeout.
    #[error(
        "{op}: timed out; the peers may be gone or slow: raise the timeout or check that every rank reached this point"
    )]
    Timeout {
        /// The PMIx function.
        op: &'static str,
    },
    /// The key or data does not exist (yet).
    #[error("{op}: {what} not found")]
    NotFound {
        /// The PMIx function.
        op: &'static str,
        /// The key or object that was looked for.
        what: String,
    },
    /// No PMIx server could be reached.
    #[error(
        "{op}: no PMIx server reachable; start the program under a PMIx launcher (maestro run, srun --mpi=pmix, mpirun)"
    )]
    Unreachable {
        /// The PMIx function.
        op: &'static str,
    },
    /// PMIx is already initialised in this process (as client, server or tool), or was
    /// finalised: PMIx allows one initialisation per process.
    #[error(
        "PMIx is already initialised in this process as {0}; keep one Client/Server/Tool per process"
    )]
    AlreadyInitialized(&'static str),
    /// The process environment is not what the call needs, and can no longer be changed
    /// safely (other threads exist).
    #[error("{0}")]
    Environment(String),
    /// An argument cannot be passed to PMIx (interior NUL byte, name too long, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A value came back with a different type than the caller asked for.
    #[error("{key}: expected a value of type {expected}, got {got}")]
    WrongType {
        /// The key.
        key: String,
        /// The type that was asked for.
        expected: &'static str,
        /// A description of what came back.
        got: String,
    },
    /// Any other PMIx failure.
    #[error("{op}: {status}")]
    Pmix {
        /// The PMIx function.
        op: &'static str,
        /// The status PMIx returned.
        status: Status,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status returned by `op` into `Ok(())` or the matching [`Error`].
pub(crate) fn check(op: &'static str, rc: i32) -> Result<()> {
    if rc == sys::PMIX_SUCCESS as i32 || rc == sys::PMIX_OPERATION_SUCCEEDED {
        return Ok(());
    }
    Err(from_status(op, rc, None))
}

/// Maps a failing status to an [`Error`]; `what` names the missing item for NOT_FOUND.
pub(crate) fn from_status(op: &'static str, rc: i32, what: Option<&str>) -> Error {
    match rc {
        sys::PMIX_ERR_NOT_SUPPORTED => Error::NotSupported { op },
        sys::PMIX_ERR_TIMEOUT => Error::Timeout { op },
        sys::PMIX_ERR_NOT_FOUND => Error::NotFound {
            op,
            what: what.unwrap_or("data").to_string(),
        },
        sys::PMIX_ERR_UNREACH => Error::Unreachable { op },
        _ => Error::Pmix {
            op,
            status: Status(rc),
        },
    }
}
