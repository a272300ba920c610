//! What an [`super::FromPm::Event`] carries besides its subscription: the event itself
//! ([`EventBody`], shared at the PM, the reader's own once decoded) and, with an offer's
//! event, the lease of a demand granted before it is made ([`Grant`]).

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::{FromPm, ToPm};
use super::{Source, TransferId};
use crate::events::PoolEvent;

/// An offer's ticket granted ahead of a demand, with the offer's event to a subscriber
/// ([`FromPm::Event`]): a demand of a CDO of the offer's name takes the bytes from `source`
/// at once and tells the PM afterwards ([`ToPm::UseLease`]), with no round trip before the
/// copy. The offer stays readable while the lease is held: a withdraw waits until every
/// holder used it (and finished) or released it, as it waits for transfers in flight.
///
/// What a ticket carries besides is the event's already: the offer's name (its `cdo`), its
/// sealed attributes (the event's, less the built-in name and size the consumer's CDO gets
/// anyway) and its provider (the event's `component:index`), so they travel once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// The lease's id: the transfer's id once it is used.
    pub lease: TransferId,
    /// Where and how to get the bytes (never [`Source::Stream`]).
    pub source: Source,
}

/// An event as [`FromPm::Event`] carries it: one the PM shares among the subscribers it
/// sends it to, or a client's own once decoded (one allocation, where decoding into a
/// shared one would take two and a copy). Encoded as the [`PoolEvent`] itself.
#[derive(Clone, Debug)]
pub enum EventBody {
    /// The PM's, shared.
    Shared(std::sync::Arc<PoolEvent>),
    /// Decoded, the reader's own.
    Own(Box<PoolEvent>),
}

impl EventBody {
    /// The event, by value (a copy only if it is shared still).
    pub fn into_event(self) -> PoolEvent {
        match self {
            EventBody::Shared(e) => std::sync::Arc::unwrap_or_clone(e),
            EventBody::Own(e) => *e,
        }
    }
}

/// Equal when the events are, shared or not.
impl PartialEq for EventBody {
    fn eq(&self, other: &EventBody) -> bool {
        **self == **other
    }
}

impl std::ops::Deref for EventBody {
    type Target = PoolEvent;
    fn deref(&self) -> &PoolEvent {
        match self {
            EventBody::Shared(e) => e,
            EventBody::Own(e) => e,
        }
    }
}

impl From<std::sync::Arc<PoolEvent>> for EventBody {
    fn from(e: std::sync::Arc<PoolEvent>) -> EventBody {
        EventBody::Shared(e)
    }
}

impl Serialize for EventBody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for EventBody {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<EventBody, D::Error> {
        Box::<PoolEvent>::deserialize(d).map(EventBody::Own)
    }
}
