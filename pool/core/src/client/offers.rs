//! This app's offers as its client knows them: how an offer's bytes reach consumers
//! (through the fabric or a file of the global file system: [`ClientCore::transport`]),
//! what the offer carries, the pieces of it the PM asks for (stream transfers), its file
//! written at the PM's request (spill), and its withdraw, which hands a file over to a PM
//! that keeps such files ([`Event::HandOver`]) and withdraws without it when the PM cannot
//! keep it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{CallError, CallId, CallResult, ClientCore, Driver, Event, Phase};
use crate::attr::{self, Attributes};
use crate::proto::{self, CdoId, Op, Refusal, ToPm, TransferId};
use fabric_types::{MemoryFile, RemoteRegion};

/// How long an app's offers go without their bytes once the PM dropped some for lack of
/// room ([`crate::proto::FromPm::BytesDropped`]), unless a withdraw of the app frees room
/// first: long enough that a producer streaming past the PM's budget stops sending bytes
/// only to have them dropped (each such offer costs a copy of its bytes in the producer,
/// the socket and the PM), short enough to carry them again soon after room was made
/// elsewhere. Consumers get the offers without bytes out of the producer's memory.
pub const INLINE_PAUSE: Duration = Duration::from_secs(1);

/// A CDO's bytes on offer and where consumers find them ([`ClientCore::offer`]): the
/// driver has made them readable (registered them with its endpoints, shared them in a
/// memory file, or written them to the file [`ClientCore::transport`] chose) before the
/// core decides what the offer carries.
#[derive(Debug)]
pub struct Offer<'a> {
    /// The CDO, declared (or sealed, when `seal` is `None`).
    pub cdo: CdoId,
    /// Its bytes, as consumers will read them.
    pub bytes: &'a [u8],
    /// Where the first endpoint reads them: their address, their length and, when
    /// `registered`, the key.
    pub region: RemoteRegion,
    /// Whether `region` is registered with the fabric (readable by RMA). An offer that is
    /// not (one whose bytes it carries, [`ClientCore::carries`], or plain memory without
    /// an endpoint) is copied out of the provider's memory by consumers on its host;
    /// others get its bytes with the ticket or by stream, never by RMA.
    pub registered: bool,
    /// Where each other endpoint reads them, in the order of the JOIN's alternates.
    pub alternates: Vec<RemoteRegion>,
    /// The memory file same-host consumers may map them from, if there is one.
    pub file: Option<MemoryFile>,
    /// Attributes to seal the CDO with in the same message (one round trip), if any.
    pub seal: Option<Attributes>,
    /// The file on the global file system the driver wrote the bytes to, whole, with
    /// their checksum, when [`ClientCore::transport`] said [`Transport::Gfs`] (consumers
    /// then read the file: [`proto::Source::Gfs`]).
    pub gfs: Option<proto::GfsFile>,
}

/// How this app may use the global file system, as its driver was set up
/// ([`ClientCore::set_gfs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GfsUse {
    /// The app has a GFS directory it writes offers' files to.
    pub dir: bool,
    /// Offers go through it unless their attributes ask for RDMA
    /// (`MSTRO_TRANSPORT_DEFAULT=GFS`).
    pub by_default: bool,
}

/// How an offer's bytes reach consumers ([`ClientCore::transport`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Readable where they are: registered with the app's fabric endpoints (or plain
    /// memory, served by stream, without one).
    Fabric,
    /// Written whole to a file under the app's GFS directory, which the offer names.
    Gfs,
}

/// What the core knows of one of its CDOs on offer.
#[derive(Debug)]
pub(super) struct OfferedHere {
    /// Its length: the PM's requests for pieces are checked against it.
    len: u64,
    /// Where consumers read it, as the offer said: what a reclaim replays.
    pub(super) region: RemoteRegion,
    pub(super) extras: proto::OfferExtras,
    /// A file of its bytes is in the app's GFS directory (the offer's own, or written at
    /// the PM's request): its withdraw hands it over to a PM that keeps files.
    file: bool,
    /// Where its withdraw stands, once asked for.
    withdraw: Option<Withdrawing>,
}

impl OfferedHere {
    /// Whether its withdraw was asked for.
    pub(super) fn withdrawing(&self) -> bool {
        self.withdraw.is_some()
    }

    /// Whether its withdraw hands its file over (being linked, or sent asking the PM to
    /// keep it): a reclaim hands it over again, to the next manager's directory.
    pub(super) fn handing_over(&self) -> bool {
        matches!(
            self.withdraw,
            Some(Withdrawing::HandingOver | Withdrawing::Sent { keep: true })
        )
    }
}

/// Where a withdraw stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Withdrawing {
    /// The driver links the file into the PM's directory ([`Event::HandOver`]).
    HandingOver,
    /// Sent; with a file for the PM to keep or not.
    Sent { keep: bool },
}

impl<T: Driver> ClientCore<T> {
    /// How this app may use the global file system from now on (default: not at all).
    pub fn set_gfs(&mut self, gfs: GfsUse) {
        self.gfs = gfs;
    }

    /// How the bytes of an offer of `cdo` reach consumers: as the attributes it is sealed
    /// with in the offer (`seal`) or was sealed with before ask ([`attr::TRANSPORT`]),
    /// else as the app's default ([`GfsUse::by_default`]). The driver makes the bytes
    /// readable that way, then offers them ([`ClientCore::offer`]).
    ///
    /// # Errors
    /// [`CallError::NoGfs`] for a CDO asking for the global file system in an app without
    /// a GFS directory; [`CallError::Attribute`] for a transport that is none.
    pub fn transport(&self, cdo: CdoId, seal: Option<&Attributes>) -> CallResult<Transport> {
        let wanted = match seal {
            Some(a) => attr::wants_gfs(a).map_err(|why| {
                CallError::Attribute(crate::schema::AttrError::Value {
                    key: attr::TRANSPORT.into(),
                    why,
                })
            })?,
            None => self.cdos.get(&cdo).and_then(|m| m.gfs),
        };
        match (wanted, self.gfs.dir) {
            (Some(true), false) => Err(CallError::NoGfs { cdo }),
            (Some(true), true) => Ok(Transport::Gfs),
            (Some(false), _) => Ok(Transport::Fabric),
            (None, dir) if dir && self.gfs.by_default => Ok(Transport::Gfs),
            (None, _) => Ok(Transport::Fabric),
        }
    }

    /// Offers `offer.cdo` (sealing it first in the same message when `offer.seal` has
    /// attributes) and files `waiter` for the answer; from now on a dispose of it waits
    /// for the PM. The core decides what the offer carries: the bytes themselves when they
    /// are at most [`ClientCore::set_inline_max`] (the PM may hand them on in tickets,
    /// [`proto::Source::Inline`]), and, when the seal's attributes ask for end-to-end
    /// integrity ([`attr::INTEGRITY`]), the checksum of the bytes among them.
    ///
    /// # Errors
    /// [`CallError::Attribute`] for seal attributes the schemas refuse (nothing is sent);
    /// [`CallError::Closed`].
    pub fn offer(
        &mut self,
        now: Instant,
        offer: Offer<'_>,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        let Offer {
            cdo,
            bytes,
            region,
            registered,
            alternates,
            file,
            seal,
            gfs,
        } = offer;
        let mut here = OfferedHere {
            len: bytes.len() as u64,
            region,
            extras: proto::OfferExtras::default(),
            file: gfs.is_some(),
            withdraw: None,
        };
        let mut extras = proto::OfferExtras::new(alternates, file);
        match gfs {
            // The file is the transport the app chose: the bytes stay out of the offer.
            Some(file) => extras = extras.with_gfs(file),
            // A 0-byte CDO (a synchronisation) always goes with its tickets: nothing to
            // read.
            None if bytes.is_empty() || (self.carries(bytes.len()) && self.sends_bytes(now)) => {
                extras = extras.with_inline(bytes);
            }
            None => {}
        }
        if !registered {
            extras = extras.with_unregistered();
        }
        here.extras = extras.clone();
        let mut sealed = None;
        let msg = match seal {
            Some(mut attributes) => {
                self.schemas.check(&mut attributes)?;
                attr::add_checksum(&mut attributes, bytes);
                sealed = Some(attributes.clone());
                ToPm::SealOffer {
                    cdo,
                    attributes,
                    region,
                    extras,
                }
            }
            None => ToPm::Offer {
                cdo,
                region,
                extras,
            },
        };
        let call = self.call_busy(now, (Op::Offer, cdo), msg, waiter)?;
        // A second offer of an offered CDO (refused) leaves the first as it is.
        if let Some(m) = self.cdos.get_mut(&cdo)
            && m.offered.is_none()
        {
            m.offered = Some(here);
            if m.sealed.is_none() {
                m.sealed = sealed;
            }
        }
        Ok(call)
    }

    /// The PM asks for `len` bytes at `offset` of offered `cdo` (a stream transfer): the
    /// driver is asked to serve them ([`Event::Serve`]) when they are within an offer of
    /// this app.
    pub(super) fn serve(&mut self, transfer: TransferId, cdo: CdoId, offset: u64, len: u64) {
        let Some(offered) = self.cdos.get(&cdo).and_then(|m| m.offered.as_ref()) else {
            tracing::warn!("pool client: asked to serve CDO {cdo}, which is not offered here");
            return;
        };
        if offset.checked_add(len).is_none_or(|end| end > offered.len) {
            tracing::warn!(
                "pool client: asked for {len} bytes at {offset} of CDO {cdo}: outside it"
            );
            return;
        }
        self.events.push_back(Event::Serve {
            transfer,
            cdo,
            offset,
            len,
        });
    }

    /// The bytes at `offset` of an offer this app was asked to serve ([`Event::Serve`]),
    /// for transfer `transfer`: sent to the PM.
    ///
    /// # Errors
    /// [`CallError::Closed`] once the connection ended.
    pub fn served(&mut self, transfer: TransferId, offset: u64, data: Vec<u8>) -> CallResult<()> {
        self.tell(ToPm::Chunk(proto::Chunk {
            transfer,
            offset,
            data,
        }))
    }

    /// Offered `cdo` was written to `file` under this app's GFS directory, or could not be
    /// (why): tells the PM (see [`Event::Spill`]). A file written is handed over at the
    /// offer's withdraw, as the offer's own would be.
    pub fn spilled(&mut self, cdo: CdoId, file: Result<proto::GfsFile, String>) {
        if file.is_ok()
            && let Some(o) = self.cdos.get_mut(&cdo).and_then(|m| m.offered.as_mut())
        {
            o.file = true;
        }
        self.queue(ToPm::Spilled { cdo, file });
    }

    /// Withdraws offered `cdo` and files `waiter` for the answer. An offer whose file is
    /// in the app's GFS directory, with a PM that keeps such files (its welcome named a
    /// directory: [`ClientCore::keep_dir`]), is handed over first: the driver links the
    /// file into that directory ([`Event::HandOver`]) and says how that went
    /// ([`ClientCore::handed_over`]); the withdraw then asks the PM to keep it. A PM that
    /// cannot keep it refuses ([`Refusal::NotKept`]): the core says so in the log and
    /// withdraws it without, and the call is answered by that withdraw.
    ///
    /// # Errors
    /// `WrongState` (refused, nothing sent) while a withdraw of `cdo` is under way;
    /// [`CallError::Closed`].
    pub fn withdraw(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        self.open()?;
        let offered = self.cdos.get(&cdo).and_then(|m| m.offered.as_ref());
        if offered.is_some_and(OfferedHere::withdrawing) {
            return Err(CallError::Refused {
                op: Op::Withdraw,
                why: Refusal::WrongState {
                    op: Op::Withdraw,
                    state: "being withdrawn".into(),
                },
            });
        }
        let hand_over = match (&self.keep_dir, offered) {
            (Some(dir), Some(o)) if o.file => Some(Arc::clone(dir)),
            _ => None,
        };
        let call = self.wait(now, (Op::Withdraw, cdo), waiter)?;
        match hand_over {
            Some(dir) => {
                self.withdrawing(cdo, Withdrawing::HandingOver);
                self.events.push_back(Event::HandOver { cdo, dir });
            }
            None => self.send_withdraw(cdo, None),
        }
        Ok(call)
    }

    /// Whether an offer made at `now` carries its bytes, if small enough: not while the
    /// PM drops them ([`ClientCore::bytes_dropped`]).
    fn sends_bytes(&self, now: Instant) -> bool {
        self.bytes_paused.is_none_or(|until| now >= until)
    }

    /// The PM did not keep the bytes offer `cdo` carried (no room): the offer stands
    /// without them, and the next offers go without theirs for [`INLINE_PAUSE`], or until
    /// a withdraw of this app frees room, rather than carry bytes the PM would drop again.
    pub(super) fn bytes_dropped(&mut self, now: Instant, cdo: CdoId) {
        if let Some(o) = self.cdos.get_mut(&cdo).and_then(|m| m.offered.as_mut()) {
            // A reclaim offers it again as the PM has it.
            o.extras.take_inline();
        }
        self.bytes_paused = Some(now + INLINE_PAUSE);
    }

    /// The driver linked the file of `cdo` into the PM's directory at `Ok(Some(path))`,
    /// found none to link (`Ok(None)`), or could not (why, said in the log): the withdraw
    /// [`Event::HandOver`] waited for goes out, asking the PM to keep the file if linked.
    pub fn handed_over(&mut self, cdo: CdoId, linked: Result<Option<Box<str>>, String>) {
        let waits = self
            .cdos
            .get(&cdo)
            .and_then(|m| m.offered.as_ref())
            .is_some_and(|o| o.withdraw == Some(Withdrawing::HandingOver));
        // Linked into a manager's directory that is gone: the hand-over to the next one's
        // (asked at its welcome) answers.
        let stale = matches!((&linked, &self.keep_dir), (Ok(Some(path)), Some(dir))
            if !path.strip_prefix(&**dir).is_some_and(|rest| rest.starts_with('/')));
        if !waits || self.closed || stale {
            return;
        }
        let keep = linked.unwrap_or_else(|why| {
            tracing::warn!("CDO {cdo} is not kept after its withdraw: {why}");
            None
        });
        self.send_withdraw(cdo, keep);
    }

    fn send_withdraw(&mut self, cdo: CdoId, keep: Option<Box<str>>) {
        let state = Withdrawing::Sent {
            keep: keep.is_some(),
        };
        self.withdrawing(cdo, state);
        self.queue(ToPm::Withdraw { cdo, keep });
    }

    /// Welcomed back by the next manager (its directory of kept files `keep_dir` now):
    /// the withdraws that handed a file over to the manager that is gone hand it over
    /// again (a manager that keeps no files gets the withdraw without it, in the replay).
    pub(super) fn hand_over_again(&mut self) {
        let mut ids: Vec<CdoId> = (self.cdos.iter())
            .filter(|(_, m)| m.offered.as_ref().is_some_and(OfferedHere::handing_over))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for cdo in ids {
            let Some(dir) = self.keep_dir.clone() else {
                self.withdrawing(cdo, Withdrawing::Sent { keep: false });
                continue;
            };
            self.withdrawing(cdo, Withdrawing::HandingOver);
            self.events.push_back(Event::HandOver { cdo, dir });
        }
    }

    fn withdrawing(&mut self, cdo: CdoId, state: Withdrawing) {
        if let Some(o) = self.cdos.get_mut(&cdo).and_then(|m| m.offered.as_mut()) {
            o.withdraw = Some(state);
        }
    }

    /// The PM refused an offer or a withdraw of `cdo` for `why`: true when the core goes
    /// on without the call hearing it (a file the PM cannot keep: withdrawn without it).
    pub(super) fn offer_refused(&mut self, op: Op, cdo: CdoId, why: &Refusal) -> bool {
        let Some(m) = self.cdos.get_mut(&cdo) else {
            return false;
        };
        match (op, m.offered.as_mut()) {
            (Op::Offer, _) if m.phase != Phase::Offered => m.offered = None,
            (Op::Withdraw, Some(o)) => {
                if let (Some(Withdrawing::Sent { keep: true }), Refusal::NotKept(not)) =
                    (o.withdraw, why)
                {
                    tracing::warn!(
                        "the pool manager does not keep CDO {cdo} after its withdraw ({not}): consumers that demand it later will not get it"
                    );
                    self.send_withdraw(cdo, None);
                    return true;
                }
                o.withdraw = None;
            }
            _ => {}
        }
        false
    }
}
