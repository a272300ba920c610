//! Leases used with no CDO kept ([`ToPm::Took`]): how a batch fetch takes the bytes of
//! the names its subscription told it of. A demand from a lease is a declare, a use of the
//! lease, the transfer's end and a dispose, four messages and a CDO at either end; a take
//! is one message and no CDO, told after the fact.
//!
//! - A lease that carried the bytes ([`Source::Inline`]) is taken at once
//!   ([`Taken::Here`]): the bytes are the offer's whatever happens to it since.
//! - A lease of memory of at most [`TAKE_MOST`] bytes ([`Taken::Copy`]) is copied by the
//!   driver, then told ([`ClientCore::took_copy`]). A use of a lease by a demand tells the
//!   PM before the copy, which holds the offer for it from then on; a take tells it after,
//!   so it is taken only while the lease table is current (see `leases`: within half the
//!   PM's lease grace of the last instant the driver had handled all the PM wrote), and
//!   the copy is kept only if it ended within that half too: a revocation written before
//!   that instant took the lease out of the table, and one written after it leaves the
//!   offer there for a whole grace. A copy that took longer (the app's thread stalled)
//!   may be of memory no longer offered: it is dropped, the lease given back, and the
//!   name demanded as any other. Larger leases go the demand's way: their copy is long,
//!   and what a take saves is small beside it.

use std::sync::Arc;
use std::time::Instant;

use super::cdos::with_built_ins;
use super::leases::Held;
use super::{CallResult, ClientCore, Driver};
use crate::attr::{self, Attributes};
use crate::proto::{Direct, Source, ToPm, TransferId};

/// The largest lease of memory a batch fetch takes with no CDO kept (4 MiB): a copy
/// this size takes about a millisecond, far within the PM's lease grace.
pub const TAKE_MOST: u64 = 4 << 20;

/// What [`ClientCore::take_leased`] found for a name.
#[derive(Debug)]
pub enum Taken<D> {
    /// The lease carried the bytes: here they are, with the attributes they were sealed
    /// with (and the built-in name, provider and size); the PM is told.
    Here(D, Attributes),
    /// A lease of memory: get the bytes from the source, then hand them to
    /// [`ClientCore::took_copy`] (or give the lease back with [`ClientCore::give_back`]
    /// when the copy failed).
    Copy(LeaseCopy, Source),
}

/// A lease of memory taken for a batch fetch, while its bytes are copied.
#[derive(Debug)]
pub struct LeaseCopy {
    /// The lease (the transfer's id at the shard that granted it).
    pub lease: TransferId,
    /// The shard whose manager granted it (0 in a pool of one).
    pub shard: usize,
    /// When the lease table was last current as the lease was taken.
    drained: Instant,
    name: Arc<str>,
    attributes: Attributes,
    provider: Arc<str>,
}

impl<T: Driver> ClientCore<T> {
    /// Takes the oldest lease of `name` at `now` for a fetch that keeps no CDO (see the
    /// module's documentation). `None` when no lease of the name is held, the oldest is
    /// of more than [`TAKE_MOST`] bytes of memory or of memory while the lease table is
    /// not current ([`ClientCore::drained`]), or the bytes it carried fail the producer's
    /// checksum (the lease is released then): declare and demand the name instead.
    ///
    /// # Errors
    /// [`crate::client::CallError::Closed`]; [`crate::client::CallError::Protocol`] when
    /// the app's ids are used up.
    pub fn take_leased(&mut self, now: Instant, name: &str) -> CallResult<Option<Taken<T::Data>>> {
        self.open()?;
        let current = self.leases.current(now);
        let takeable = |h: &Held| match &h.source {
            Source::Inline { .. } => true,
            s => current.is_some() && s.len() <= TAKE_MOST,
        };
        let Some((lease, held)) = self.leases.take_if(name, takeable) else {
            return Ok(None);
        };
        let Held {
            source,
            attributes,
            provider,
            name,
        } = held;
        let Source::Inline { bytes } = source else {
            let Some(drained) = current else {
                // Not reached: `takeable` takes a lease of memory only while current.
                self.release(lease);
                return Ok(None);
            };
            let copy = LeaseCopy {
                lease,
                shard: self.shard.index(),
                drained,
                name,
                attributes,
                provider,
            };
            return Ok(Some(Taken::Copy(copy, source)));
        };
        let data = T::inline(bytes, None);
        let here = self.keep_taken(lease, (data, None), (&name, attributes, &provider))?;
        Ok(here.map(|(data, attributes)| Taken::Here(data, attributes)))
    }

    /// The bytes of `copy`, copied by `now` (`direct`: straight from the provider's
    /// memory, how): the app's, with the attributes they were sealed with, once the PM is
    /// told. `None` when the copy came too late to be sure of (see the module's
    /// documentation) or the bytes fail the producer's checksum: the lease is given back,
    /// demand the name instead.
    ///
    /// # Errors
    /// [`crate::client::CallError::Closed`]; [`crate::client::CallError::Protocol`] when
    /// the app's ids are used up.
    pub fn took_copy(
        &mut self,
        now: Instant,
        copy: LeaseCopy,
        got: (T::Data, Option<Direct>),
    ) -> CallResult<Option<(T::Data, Attributes)>> {
        let LeaseCopy {
            lease,
            drained,
            name,
            attributes,
            provider,
            ..
        } = copy;
        self.open()?;
        if !self.leases.copied_in_time(drained, now) {
            tracing::debug!("pool client: lease {lease} of {name:?} copied too late to keep");
            self.release(lease);
            return Ok(None);
        }
        self.keep_taken(lease, got, (&name, attributes, &provider))
    }

    /// Gives back the lease of `copy`, whose copy failed.
    pub fn give_back(&mut self, copy: LeaseCopy) {
        self.release(copy.lease);
    }

    /// The bytes of `lease` taken: checked against the producer's checksum (the lease
    /// given back when they fail it: `None`), the PM told under a CDO id of the app's
    /// own, and the attributes completed.
    fn keep_taken(
        &mut self,
        lease: TransferId,
        (data, direct): (T::Data, Option<Direct>),
        (name, attributes, provider): (&str, Attributes, &str),
    ) -> CallResult<Option<(T::Data, Attributes)>> {
        if let Err(why) = attr::verify_checksum(&attributes, data.as_ref()) {
            tracing::warn!("pool client: lease {lease} of {name:?}: corrupt bytes ({why})");
            self.release(lease);
            return Ok(None);
        }
        let cdo = self.reserve(1)?;
        // Sent with the step's write, not deferred: a batch fetch that takes only leases
        // sends nothing else, and the reports of events taken (`ToPm::Taken`), which open
        // the subscription's window again, wait for it (deferred, the 8 B stream in
        // batches ran at 112-143k CDOs/s against 134-181k before, the PM idle).
        self.queue(ToPm::Took { cdo, lease, direct });
        let attributes = with_built_ins(attributes, name, provider, data.as_ref().len());
        Ok(Some((data, attributes)))
    }
}
