//! Maestro Core's status codes ([`Status`]) and the layer's error ([`Error`]: a status plus
//! a message saying what was wrong and what to do).

use pool::CallError;
use pool::ClientError;
use pool::proto::Refusal;

/// Maestro Core's `mstro_status`: what every call of the C API returns. The numbers are
/// part of the ABI (`maestro.h` has the same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A failure not covered by a more specific status (the message says what).
    Fail = 1,
    /// An invalid argument: a NULL or disposed handle, a bad name, key, value or selector.
    Invarg = 2,
    /// Out of memory.
    Nomem = 3,
    /// Not implemented.
    Unimpl = 4,
    /// Called a second time where once is all that is allowed (`mstro_init`,
    /// `mstro_pm_start`).
    NotTwice = 5,
    /// A wait ended before what it waited for happened.
    Timeout = 6,
    /// Nothing of that name: no provider for a demanded CDO, no such attribute.
    Noent = 7,
    /// `mstro_init` has not been called (or `mstro_finalize` was).
    Uninit = 8,
    /// The pool manager cannot be reached, or is gone.
    NoPm = 9,
    /// The operation is not allowed in the current state of what it acts on (a CDO's:
    /// offer before seal, ...; a group's; the pool manager's: terminating one this
    /// process does not serve).
    Invstate = 10,
}

impl Status {
    /// Every status, in numeric order.
    pub const ALL: [Status; 11] = [
        Status::Ok,
        Status::Fail,
        Status::Invarg,
        Status::Nomem,
        Status::Unimpl,
        Status::NotTwice,
        Status::Timeout,
        Status::Noent,
        Status::Uninit,
        Status::NoPm,
        Status::Invstate,
    ];

    /// The status with this number, if any.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as i32 == code)
    }

    /// A sentence describing the status (`mstro_status_description`).
    pub fn description(self) -> &'static str {
        match self {
            Status::Ok => "success",
            Status::Fail => "failure",
            Status::Invarg => "invalid argument",
            Status::Nomem => "out of memory",
            Status::Unimpl => "not implemented",
            Status::NotTwice => "must not be called twice",
            Status::Timeout => "timed out",
            Status::Noent => "no such entry",
            Status::Uninit => "maestro is not initialized (call mstro_init first)",
            Status::NoPm => "the pool manager cannot be reached",
            Status::Invstate => {
                "operation not allowed in the current state (of the CDO, group or pool manager)"
            }
        }
    }

    /// The C name (`MSTRO_OK`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "MSTRO_OK",
            Status::Fail => "MSTRO_FAIL",
            Status::Invarg => "MSTRO_INVARG",
            Status::Nomem => "MSTRO_NOMEM",
            Status::Unimpl => "MSTRO_UNIMPL",
            Status::NotTwice => "MSTRO_NOT_TWICE",
            Status::Timeout => "MSTRO_TIMEOUT",
            Status::Noent => "MSTRO_NOENT",
            Status::Uninit => "MSTRO_UNINIT",
            Status::NoPm => "MSTRO_NO_PM",
            Status::Invstate => "MSTRO_INVSTATE",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong: the status the C API returns and a message for people, and the error
/// of the layer below that caused it, where there is one ([`std::error::Error::source`]:
/// a [`ClientError`] to match on, a schema or fabric error). Two errors are equal when
/// their status and message are.
#[derive(Clone, Debug)]
pub struct Error {
    /// The status code.
    pub status: Status,
    /// What was wrong and what to do.
    pub message: String,
    /// The error of the layer below, if this one comes from it.
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        self.status == other.status && self.message == other.message
    }
}

impl Eq for Error {}

impl Error {
    /// An error with `status` and `message`.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
            source: None,
        }
    }

    /// An error with `status` whose message is `cause`'s, kept as its source.
    fn caused_by(status: Status, cause: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error {
            status,
            message: cause.to_string(),
            source: Some(std::sync::Arc::new(cause)),
        }
    }

    /// [`Status::Invarg`] with `message`.
    pub fn invarg(message: impl Into<String>) -> Error {
        Error::new(Status::Invarg, message)
    }

    /// The same error with `what` (the operation and its object) in front of the message.
    pub fn context(self, what: impl std::fmt::Display) -> Error {
        Error {
            status: self.status,
            message: format!("{what}: {}", self.message),
            source: self.source,
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Error {
        let status = match &e {
            ClientError::Call(call) => match call {
                CallError::Refused { why, .. } => match why {
                    Refusal::WrongState { .. } => Status::Invstate,
                    Refusal::BadName | Refusal::BadSelector(_) => Status::Invarg,
                    Refusal::NoProvider | Refusal::NoPath(_) => Status::Noent,
                    _ => Status::Fail,
                },
                CallError::Timeout(_) | CallError::AckTooLate(_) => Status::Timeout,
                CallError::Disposed { .. } => Status::Invstate,
                CallError::Closed => Status::NoPm,
                CallError::Attribute(_) => Status::Invarg,
                CallError::Integrity { .. }
                | CallError::Unreadable(_)
                | CallError::NoGfs { .. }
                | CallError::Protocol(_) => Status::Fail,
            },
            ClientError::Unreachable(_) => Status::NoPm,
            ClientError::Schema(_) | ClientError::Selector(_) => Status::Invarg,
            ClientError::SubscriptionEnded(_)
            | ClientError::Gfs(_)
            | ClientError::Io(_)
            | ClientError::Frame(_)
            | ClientError::Fabric(_)
            | ClientError::NoFabric(_) => Status::Fail,
        };
        Error::caused_by(status, e)
    }
}

impl From<pool::schema::SchemaError> for Error {
    fn from(e: pool::schema::SchemaError) -> Error {
        Error::caused_by(Status::Invarg, e)
    }
}

impl From<pool::schema::AttrError> for Error {
    fn from(e: pool::schema::AttrError) -> Error {
        Error::caused_by(Status::Invarg, e)
    }
}

impl From<fabric::FabricError> for Error {
    fn from(e: fabric::FabricError) -> Error {
        Error::caused_by(Status::Fail, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error from the client keeps it as its source, through `context` too: a Rust
    /// caller matches the client's variant, a C caller gets the status.
    #[test]
    fn the_clients_error_is_kept_as_the_source() {
        let e = Error::from(ClientError::Call(CallError::Refused {
            op: pool::proto::Op::Demand,
            why: Refusal::NoProvider,
        }))
        .context("demand of field");
        assert_eq!(e.status, Status::Noent);
        assert!(
            e.message.starts_with("demand of field: demand refused"),
            "{e}"
        );
        let source = std::error::Error::source(&e).expect("a source");
        assert!(matches!(
            source.downcast_ref::<ClientError>(),
            Some(ClientError::Call(CallError::Refused {
                why: Refusal::NoProvider,
                ..
            }))
        ));
        assert!(std::error::Error::source(&Error::invarg("x")).is_none());
    }

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (i, s) in Status::ALL.into_iter().enumerate() {
            assert_eq!(s as i32, i as i32);
            assert_eq!(Status::from_code(i as i32), Some(s));
            assert!(s.name().starts_with("MSTRO_"));
            assert!(!s.description().is_empty());
        }
        assert_eq!(Status::from_code(-1), None);
        assert_eq!(Status::from_code(Status::ALL.len() as i32), None);
    }

    #[test]
    fn refusals_map_to_statuses() {
        let wrong = ClientError::Call(CallError::Refused {
            op: pool::proto::Op::Offer,
            why: Refusal::WrongState {
                op: pool::proto::Op::Offer,
                state: "declared".into(),
            },
        });
        assert_eq!(Error::from(wrong).status, Status::Invstate);
        let gone = ClientError::Call(CallError::Refused {
            op: pool::proto::Op::Demand,
            why: Refusal::NoProvider,
        });
        assert_eq!(Error::from(gone).status, Status::Noent);
        assert_eq!(
            Error::from(ClientError::Call(CallError::Timeout(
                pool::proto::Op::Demand
            )))
            .status,
            Status::Timeout
        );
        assert_eq!(
            Error::from(ClientError::Call(CallError::Closed)).status,
            Status::NoPm
        );
    }
}
