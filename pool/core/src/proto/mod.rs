//! The wire protocol between applications and the pool manager (PM).
//!
//! Messages are serde enums ([`ToPm`], [`FromPm`]) encoded with postcard (compact, varint)
//! and carried in frames: `b"MSTR"`, a protocol version byte, a little-endian `u32` payload
//! length, then the payload, which is a batch of messages (`Vec`), so many small operations
//! travel in one frame. Frames larger than [`MAX_FRAME`] are refused. Decoding never panics:
//! every malformed frame is a [`FrameError`] saying what was wrong, and the driver closes that
//! one connection.

use fabric_types::RemoteRegion;
use serde::{Deserialize, Serialize};

use crate::attr::Attributes;
use crate::events::{EventKinds, FabricChange, SubId, SubscribeOptions};
use crate::selector::Expr;

mod event;
mod frame;
mod source;

pub use crate::ids::{AppId, CDO_SEQ_BITS, CdoId, MAX_APP, TransferId, cdo_ids, cdo_owner};
pub use event::{EventBody, Grant};
pub use frame::{
    FrameError, decode, decode_join, drain_frames, encode, encode_into, encode_split_into,
    payload_len,
};
pub use source::{
    Direct, FabricEndpoint, GfsFile, HostMemory, InlineBytes, MAX_GFS_PATH, OfferExtras,
    ProcessMemory, Source,
};

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"MSTR";
/// Protocol version carried in every frame (25: a lease used with no CDO kept is one
/// message, [`ToPm::Took`]; 24: an offer's memory file may be a slab of
/// many buffers, [`fabric_types::MemoryFile::slab`], which same-host consumers map once and
/// copy out of; a lease comes inside its offer's event, [`Grant`], no longer as a message of
/// its own; 23: events flow in a window per subscription,
/// [`ToPm::Taken`] opens it again, see [`crate::events::EVENT_WINDOW`]; 22: the PM says when it drops the bytes an
/// offer carried, [`FromPm::BytesDropped`]; 21: offers that are not registered with the
/// fabric, [`OfferExtras::with_unregistered`], copied by same-host consumers only
/// ([`HostMemory::copy_only`]); 15: a withdraw may hand a GFS offer's file
/// over to the pool, [`ToPm::Discard`] ends such CDOs, apps announce their GFS directory
/// and the PM may have a provider write an offer there, [`FromPm::Spill`], `keep` of [`ToPm::Withdraw`], whose directory `Welcome` names; 14: offers written to a global file system,
/// [`OfferExtras::with_gfs`], ticketed as [`Source::Gfs`]; 13: offer events carry leases,
/// [`Grant`], [`ToPm::UseLease`], [`ToPm::Release`], [`FromPm::Revoke`]; 12: a
/// connection refused admission is told why, [`Refusal::NotAdmitted`]; 11: JOIN names the app's job; 10: endpoint
/// addresses travel as bytes, not hex; 9: observers and their queries, see
/// [`crate::view`]; 8: small CDOs inline; 7: selectors travel flat, see
/// [`crate::selector::Expr`]; 6: apps number their own CDOs, and declares and disposes that
/// cannot be refused go unanswered).
pub const VERSION: u8 = 25;
/// Header size: magic, version, length.
pub const HEADER: usize = 9;
/// Largest payload accepted (16 MiB): CDO data never travels in frames, only metadata.
pub const MAX_FRAME: usize = 16 << 20;

/// Longest CDO name, in bytes.
pub const MAX_NAME: usize = 4096;

/// Checks a CDO name before it is declared: 1 to [`MAX_NAME`] bytes, none of them NUL (C
/// programs, whose strings end at a NUL, must be able to name every CDO).
///
/// # Errors
/// [`Refusal::BadName`] otherwise (what the PM would answer).
pub fn check_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(Refusal::BadName);
    }
    Ok(())
}

/// Largest piece of CDO data carried by one [`ToPm::Chunk`] / [`FromPm::Chunk`] (the
/// last-resort stream over the control connection).
pub const MAX_CHUNK: u64 = 4 << 20;

/// The operation a [`FromPm::Done`] or [`FromPm::Refused`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// [`ToPm::Join`]
    Join,
    /// [`ToPm::Leave`]
    Leave,
    /// [`ToPm::Declare`]
    Declare,
    /// [`ToPm::Seal`]
    Seal,
    /// [`ToPm::Offer`]
    Offer,
    /// [`ToPm::Require`]
    Require,
    /// [`ToPm::Demand`]
    Demand,
    /// [`ToPm::Retract`]
    Retract,
    /// [`ToPm::Withdraw`]
    Withdraw,
    /// [`ToPm::Dispose`]
    Dispose,
    /// [`ToPm::TransferDone`]
    TransferDone,
    /// [`ToPm::Fetch`]
    Fetch,
    /// [`ToPm::Chunk`]
    Chunk,
    /// [`ToPm::Subscribe`]
    Subscribe,
    /// [`ToPm::Unsubscribe`]
    Unsubscribe,
    /// [`ToPm::Ack`]
    Ack,
    /// [`ToPm::Report`]
    Report,
    /// [`ToPm::Release`]
    Release,
    /// An observer's question.
    Query,
    /// [`ToPm::Spilled`]
    Spilled,
    /// [`ToPm::Discard`]
    Discard,
    /// [`ToPm::Taken`]
    Taken,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Join => "join",
            Op::Leave => "leave",
            Op::Declare => "declare",
            Op::Seal => "seal",
            Op::Offer => "offer",
            Op::Require => "require",
            Op::Demand => "demand",
            Op::Retract => "retract",
            Op::Withdraw => "withdraw",
            Op::Dispose => "dispose",
            Op::TransferDone => "transfer-done",
            Op::Fetch => "fetch",
            Op::Chunk => "chunk",
            Op::Subscribe => "subscribe",
            Op::Unsubscribe => "unsubscribe",
            Op::Ack => "ack",
            Op::Report => "report",
            Op::Release => "release",
            Op::Query => "query",
            Op::Spilled => "spilled",
            Op::Discard => "discard",
            Op::Taken => "taken",
        })
    }
}

/// What [`ToPm::Join`] carries: identity, where the app is, and the proof answering the
/// PM's challenge (HMAC-SHA256 of the workflow secret over the challenge nonce and the
/// identity; see `auth`). Boxed in the message: it travels once per app, and every other
/// message stays small.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Join {
    /// Workflow name.
    pub workflow: String,
    /// Component name.
    pub component: String,
    /// Component index.
    pub index: i64,
    /// The app's host name (same host: shm is usable between apps).
    pub host: String,
    /// A random token of the app's process (same token: same process).
    pub process: u64,
    /// The job the app runs in, as its launcher names it (the PMIx namespace:
    /// `maestro.job.N`, `slurm.pmix.JOB.STEP`, `prterun-...`); empty when it runs under
    /// none. For the pool's views: which jobs share the pool.
    pub job: String,
    /// The app's fabric endpoint; `None` when it has no RMA provider (its CDOs then
    /// travel by stream).
    pub endpoint: Option<FabricEndpoint>,
    /// Its endpoints on its other networks (same provider), best first: what transfers
    /// fall back to when the first cannot reach a peer or its link is down.
    pub alternates: Vec<FabricEndpoint>,
    /// The network (address and prefix of the interface) of each endpoint, the first then
    /// the alternates, where the app knows it: the PM plans RMA between endpoints on a
    /// common network.
    pub networks: Vec<Option<crate::Subnet>>,
    /// Where same-host consumers may copy its offers from its memory, if they may.
    pub memory: Option<ProcessMemory>,
    /// A PMIx credential, where the app's PMIx host issues them.
    pub credential: Option<Vec<u8>>,
    /// The NIC (libfabric domain) of each endpoint, the first then the alternates, and
    /// why the first was chosen (for the pool's views; the PM decides nothing by them).
    pub nics: Nics,
    /// The global file system directory the app writes and reads CDOs' files in
    /// (`MSTRO_TRANSPORT_GFS_DIR`), where it has one: the PM may have it write an offer
    /// there ([`FromPm::Spill`]) for a consumer of the same directory it shares no network
    /// with.
    pub gfs: Option<String>,
    /// An app, or a read-only observer of the pool (see [`crate::view`]).
    pub role: Role,
    /// The proof.
    pub proof: Vec<u8>,
    /// An app that held state with a pool manager that is gone asks for its old app id
    /// back, to replay what it holds (see docs/developers/failover.md); `None` for a new
    /// app.
    pub reclaim: Option<Reclaim>,
    /// In a pool of several shards (docs/developers/shards.md): the app id shard 0 gave
    /// this app, which it joins another shard as; `None` at shard 0 (which numbers the
    /// apps) and in a pool of one manager.
    pub member: Option<AppId>,
}

/// The component name a standby pool manager watches the active one under (an
/// observer: see `maestro pm --standby-for`); the active one lists it in its status.
pub const STANDBY: &str = "maestro-standby";

/// What an app that lost its pool manager names when it joins the next one of the
/// workflow ([`Join::reclaim`]): who it was, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaim {
    /// Its app id with the manager that is gone: its CDO ids stay valid only with it.
    pub app: AppId,
    /// That manager's instance (its `Welcome`'s `pool`).
    pub generation: u64,
    /// The largest event serial its subscriptions heard: the new manager numbers its
    /// events after it, so that serials only grow.
    pub last_serial: u64,
}

/// The NICs of an app's endpoints, as [`Join`] announces them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nics {
    /// The libfabric domain of each endpoint, the first then the alternates.
    pub names: Vec<String>,
    /// Which network NIC the app was given and why (e.g. `ib0, chosen by the PMIx host`),
    /// where it knows; the first endpoint may be another (`shm` for its own host).
    pub reason: Option<String>,
}

/// Who joins: an application of the workflow, or an observer that may only ask
/// [`ToPm::Query`] (a monitoring tool, `maestro pool`): not counted as an app, raising no
/// events, refused everything else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// An application.
    #[default]
    App,
    /// A read-only observer.
    Observer,
}

/// A piece of a stream transfer: the provider sends it ([`ToPm::Chunk`]) and the PM relays
/// it unchanged to the consumer ([`FromPm::Chunk`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The transfer.
    pub transfer: TransferId,
    /// Offset in the CDO.
    pub offset: u64,
    /// The bytes.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// Messages from an application to the PM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToPm {
    /// Join the workflow (see [`Join`]).
    Join(Box<Join>),
    /// Leave the workflow (answered by `Bye` once nothing required of this app is pending).
    Leave,
    /// Declare a CDO under an id of the app's own (see [`cdo_ids`]); answered only by a
    /// refusal (a bad name, an id not the app's or already in use).
    Declare {
        /// The CDO's id, the next of the app's [`cdo_ids`].
        cdo: CdoId,
        /// The CDO name.
        name: String,
    },
    /// Seal a declared CDO with its attributes.
    Seal {
        /// The CDO.
        cdo: CdoId,
        /// Its attributes (frozen from now on).
        attributes: Attributes,
    },
    /// Offer a sealed CDO's bytes, registered on the app's endpoint as `region`.
    Offer {
        /// The CDO.
        cdo: CdoId,
        /// Where the bytes are (its length is the CDO's size; 0 for a synchronisation CDO),
        /// registered with the app's first endpoint.
        region: RemoteRegion,
        /// The same bytes registered with each of the app's alternate endpoints, and the
        /// memory file holding them.
        extras: OfferExtras,
    },
    /// `Seal` then `Offer` in one message, answered like the offer (`Done` with
    /// [`Op::Offer`], or a refusal as an offer): for producers that seal and offer at once.
    SealOffer {
        /// The CDO.
        cdo: CdoId,
        /// Its attributes.
        attributes: Attributes,
        /// Where the bytes are.
        region: RemoteRegion,
        /// As [`ToPm::Offer`]'s.
        extras: OfferExtras,
    },
    /// Declare the intent to consume a CDO (the PM may start moving it).
    Require {
        /// The CDO (declared by this app, named as the one wanted).
        cdo: CdoId,
    },
    /// Ask for the CDO's bytes now; answered by a ticket when an offer exists.
    Demand {
        /// The CDO.
        cdo: CdoId,
    },
    /// Demand the group named as `group` (a declared CDO: see `pool`'s groups) and all its
    /// members at once: the PM declares the members itself with the ids `first`,
    /// `first + 1`, ... (at most `capacity` of them, which the app reserved), answers
    /// [`FromPm::GroupMembers`] with their names, then tickets each as demanded.
    DemandGroup {
        /// The consumer's group CDO.
        group: CdoId,
        /// The first id reserved for the members.
        first: CdoId,
        /// How many ids are reserved.
        capacity: u32,
    },
    /// Demand `cdo` (declared with the name of the lease's offer), served by lease
    /// `lease` ([`Grant`]): the app is taking (or took) the bytes itself, nobody
    /// waits for an answer (only a refusal comes back). A lease of memory is a transfer
    /// from now on, ended by [`ToPm::TransferDone`]; a lease of inline bytes is done.
    UseLease {
        /// The app's CDO.
        cdo: CdoId,
        /// The lease.
        lease: TransferId,
    },
    /// A lease used with no CDO kept (a batch fetch, mostly): `Declare`, `UseLease` and
    /// `Dispose` in one for a lease of inline bytes ([`Source::Inline`]), which the app
    /// took; with `TransferDone` before the dispose for a lease of memory, whose bytes
    /// the app copied already (`direct`: how, for the transport's event).
    ///
    /// `cdo` is an id the app reserved, as a declare's. The PM keeps no CDO under it
    /// unless a subscription hears of declares, demands, disposes or transports: then the
    /// message is those operations, each with its events.
    ///
    /// Unanswered (only a refusal comes back: `UnknownTransfer` for a lease not the
    /// app's, one the PM abandoned a grace after revoking it, say). The app keeps a copy
    /// of a lease's memory only if it ended within half the PM's lease grace
    /// (`Welcome`'s `lease_grace`) of taking the lease: the offer was there throughout.
    Took {
        /// An id of the app's own, reserved for the CDO.
        cdo: CdoId,
        /// The lease.
        lease: TransferId,
        /// For a lease of memory copied straight from the provider's memory: how.
        direct: Option<Direct>,
    },
    /// The app will not use these leases (revoked, or held too long unused): the offers
    /// they pinned may go.
    Release {
        /// The leases, at most [`MAX_RELEASE`].
        leases: Vec<TransferId>,
    },
    /// Cancel a require (or a waiting demand).
    Retract {
        /// The CDO.
        cdo: CdoId,
    },
    /// Take an offer back; acknowledged once no transfer reads from it.
    Withdraw {
        /// The CDO.
        cdo: CdoId,
        /// For an offer written to the global file system: the file, linked into the
        /// directory `Welcome` named (`DIR/ID`), that the pool keeps offering in the
        /// producer's stead (refused with [`Refusal::NotKept`] if it cannot; the offer
        /// then stays).
        keep: Option<Box<str>>,
    },
    /// Forget a CDO.
    Dispose {
        /// The CDO.
        cdo: CdoId,
        /// Answer with `Done` (else only a refusal comes back): an app that knows the CDO
        /// is in a state that allows it (declared, sealed, withdrawn, or demanded and
        /// arrived) need not wait.
        answer: bool,
    },
    /// End the CDOs the pool keeps under `name` (offers their producers handed over at
    /// withdraw): no longer demandable, their files removed once nobody reads them.
    /// Answered by [`FromPm::Discarded`]; refused (`NotAllowed`) when another component
    /// owns the name.
    Discard {
        /// The app's number for this call (the answer carries it).
        local: u64,
        /// The CDOs' name.
        name: String,
    },
    /// Answers [`FromPm::Spill`]: offered `cdo` is written whole to `file` under the app's
    /// GFS directory, or why it could not be.
    Spilled {
        /// The offered CDO.
        cdo: CdoId,
        /// The file, or why there is none.
        file: Result<GfsFile, String>,
    },
    /// A transfer the PM ticketed to this app finished (`error` set on failure). The end
    /// of a transfer that completed a demand comes as a deferred notice: with the app's
    /// next message, or within a millisecond.
    TransferDone {
        /// The transfer.
        transfer: TransferId,
        /// Why it failed, if it did.
        error: Option<String>,
        /// The consumer took the bytes straight from the provider's memory (see
        /// [`ProcessMemory`]) rather than reading them by RMA: for the transport event.
        direct: Option<Direct>,
    },
    /// Consumer of a [`Source::Stream`] ticket: send me `len` bytes at `offset`.
    Fetch {
        /// The transfer.
        transfer: TransferId,
        /// Offset in the CDO.
        offset: u64,
        /// At most [`MAX_CHUNK`].
        len: u64,
    },
    /// Provider answering [`FromPm::Serve`]: the bytes asked for.
    Chunk(Chunk),
    /// Subscribe to pool events; `local` is the app's handle, echoed back.
    Subscribe {
        /// The app's handle.
        local: u64,
        /// The kinds wanted.
        kinds: EventKinds,
        /// The parsed selector (the PM compiles it again).
        selector: Box<Expr>,
        /// Delivery options.
        options: SubscribeOptions,
    },
    /// End a subscription (operations waiting for its acks proceed).
    Unsubscribe {
        /// The subscription.
        sub: SubId,
    },
    /// Acknowledge event `serial` of subscription `sub`.
    Ack {
        /// The subscription.
        sub: SubId,
        /// The event's serial.
        serial: u64,
    },
    /// A fabric change the app's PMIx host raised (for a PM outside the app's job).
    Report {
        /// What changed.
        change: FabricChange,
    },
    /// An observer's question (answered with [`FromPm::View`] carrying the same `id`).
    Query {
        /// Chosen by the observer, echoed in the answer.
        id: u64,
        /// The question.
        query: crate::view::Query,
    },
    /// A reclaiming app's replay of what the manager that is gone had confirmed is over:
    /// what it sends from now on (operations that manager never answered, new ones) is
    /// announced to subscribers as any operation is (see docs/developers/failover.md).
    Replayed,
    /// The app took `count` more events of subscription `sub` from its queue: the PM
    /// may send as many more (see [`crate::events::EVENT_WINDOW`]). Unanswered; one for
    /// a subscription that is not the app's, or is no more, is ignored.
    Taken {
        /// The subscription.
        sub: SubId,
        /// Events taken since the last report.
        count: u32,
    },
}

impl ToPm {
    /// The CDO an operation on an existing CDO names.
    pub fn cdo(&self) -> Option<CdoId> {
        match self {
            ToPm::Seal { cdo, .. }
            | ToPm::Offer { cdo, .. }
            | ToPm::SealOffer { cdo, .. }
            | ToPm::Require { cdo }
            | ToPm::Demand { cdo }
            | ToPm::UseLease { cdo, .. }
            | ToPm::Took { cdo, .. }
            | ToPm::DemandGroup { group: cdo, .. }
            | ToPm::Retract { cdo }
            | ToPm::Withdraw { cdo, .. }
            | ToPm::Dispose { cdo, .. }
            | ToPm::Declare { cdo, .. } => Some(*cdo),
            _ => None,
        }
    }

    /// Which operation this message is.
    pub fn op(&self) -> Op {
        match self {
            ToPm::Join(_) | ToPm::Replayed => Op::Join,
            ToPm::Leave => Op::Leave,
            ToPm::Declare { .. } => Op::Declare,
            ToPm::Seal { .. } => Op::Seal,
            ToPm::Offer { .. } | ToPm::SealOffer { .. } => Op::Offer,
            ToPm::Require { .. } => Op::Require,
            ToPm::Demand { .. }
            | ToPm::DemandGroup { .. }
            | ToPm::UseLease { .. }
            | ToPm::Took { .. } => Op::Demand,
            ToPm::Release { .. } => Op::Release,
            ToPm::Retract { .. } => Op::Retract,
            ToPm::Withdraw { .. } => Op::Withdraw,
            ToPm::Dispose { .. } => Op::Dispose,
            ToPm::TransferDone { .. } => Op::TransferDone,
            ToPm::Fetch { .. } => Op::Fetch,
            ToPm::Chunk(_) => Op::Chunk,
            ToPm::Subscribe { .. } => Op::Subscribe,
            ToPm::Unsubscribe { .. } => Op::Unsubscribe,
            ToPm::Ack { .. } => Op::Ack,
            ToPm::Report { .. } => Op::Report,
            ToPm::Query { .. } => Op::Query,
            ToPm::Spilled { .. } => Op::Spilled,
            ToPm::Discard { .. } => Op::Discard,
            ToPm::Taken { .. } => Op::Taken,
        }
    }
}

/// Why the PM refused an operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The app has not joined (or its JOIN was refused).
    NotJoined,
    /// A second JOIN on one connection.
    DuplicateJoin,
    /// The proof of the workflow secret is wrong or missing.
    BadProof,
    /// Evidence says the peer is not the PM's user: the kernel names another user's
    /// process, or the PM's PMIx host calls its credential forged or expired (the reason
    /// is attached).
    NotTheUser(String),
    /// Joined with another workflow name than the PM serves.
    WrongWorkflow,
    /// The CDO id is not one of this app's.
    UnknownCdo,
    /// A declared CDO id is not in the app's range ([`cdo_ids`]) or already in use.
    BadCdoId,
    /// The PM has admitted [`MAX_APP`] apps over its lifetime and numbers no more.
    TooManyApps,
    /// The operation is not allowed in the CDO's state.
    WrongState {
        /// The operation.
        op: Op,
        /// The state the CDO is in.
        state: String,
    },
    /// The CDO name is empty or too long.
    BadName,
    /// A demanded CDO can no longer be provided (its providers are gone).
    NoProvider,
    /// The transfer id is not one ticketed to (or served by) this app.
    UnknownTransfer,
    /// A fetch or chunk outside the CDO or larger than [`MAX_CHUNK`].
    BadRange,
    /// The selector could not be compiled (the reason is attached).
    BadSelector(String),
    /// The subscription id is not one of this app's.
    UnknownSubscription,
    /// The application reached one of its quotas (which, its value, and the `maestro pm`
    /// option that raises it are attached).
    Quota(String),
    /// The application may not do this (the reason and who may are attached): offering a
    /// name another component owns, reporting a fabric change it cannot know of.
    NotAllowed(String),
    /// The connection waited too long to join, or made room for others waiting (the
    /// reason, and the `maestro pm` option that sets the limit, are attached).
    NotAdmitted(String),
    /// A withdraw asked the pool to keep the offer's file, and it cannot (the reason, and
    /// what to do, are attached); the offer stays as it was.
    NotKept(String),
    /// The pool manager is in its grace period after taking over from one that is gone:
    /// only apps reclaiming what they held may join until it ends (retry then).
    Grace,
    /// A reclaim the manager cannot grant (the reason is attached: its grace period is
    /// over, or another connection reclaimed that app id); join as a new app.
    NotReclaimed(String),
    /// A JOIN that does not fit this manager's place among the shards of its pool (why:
    /// shard 0 numbers the apps and takes no member id; another shard takes only apps
    /// of shard 0, by the id it gave, once each).
    Shard(String),
    /// A demanded CDO's providers are on hosts the fabric no longer joins to the
    /// consumer's (the hosts and the switch links down are attached); demand again once
    /// the link is back.
    NoPath(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotJoined => f.write_str("not joined: send Join first"),
            Refusal::DuplicateJoin => f.write_str("already joined on this connection"),
            Refusal::BadProof => {
                f.write_str("wrong or missing proof of the workflow secret")
            }
            Refusal::NotTheUser(why) => write!(
                f,
                "{why}; only the workflow's user may join its pool manager, from any job or host, holding its PM info"
            ),
            Refusal::WrongWorkflow => {
                f.write_str("this pool manager serves another workflow")
            }
            Refusal::UnknownCdo => f.write_str("unknown CDO id for this application"),
            Refusal::BadCdoId => f.write_str(
                "declared CDO id is not this application's next one (ids come from its app id, see cdo_ids) or is in use",
            ),
            Refusal::TooManyApps => write!(
                f,
                "this pool manager has admitted {MAX_APP} applications; start a new one"
            ),
            Refusal::WrongState { op, state } => {
                write!(f, "{op} is not allowed on a CDO that is {state}")
            }
            Refusal::BadName => f.write_str("CDO names must be 1 to 4096 bytes, without a NUL byte"),
            Refusal::NoProvider => {
                f.write_str("no provider of this CDO is left (they left or died)")
            }
            Refusal::NoPath(why) => write!(f, "{why}; demand again once the link is back"),
            Refusal::UnknownTransfer => f.write_str("unknown transfer id for this application"),
            Refusal::BadRange => write!(
                f,
                "fetch or chunk outside the CDO or larger than {MAX_CHUNK} bytes"
            ),
            Refusal::BadSelector(why) => write!(f, "subscription refused: {why}"),
            Refusal::UnknownSubscription => {
                f.write_str("unknown subscription id for this application")
            }
            Refusal::Quota(why) => write!(f, "quota reached: {why}"),
            Refusal::NotAllowed(why) => write!(f, "not allowed: {why}"),
            Refusal::NotAdmitted(why) => write!(f, "not admitted: {why}"),
            Refusal::NotKept(why) => write!(f, "not kept: {why}"),
            Refusal::Grace => f.write_str(
                "the pool manager is in its grace period after a failover: only apps reclaiming what they held may join; retry when it ends",
            ),
            Refusal::NotReclaimed(why) => write!(f, "not reclaimed: {why}"),
            Refusal::Shard(why) => write!(f, "not a JOIN for this shard: {why}"),
        }
    }
}

/// Messages from the PM to an application.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromPm {
    /// The JOIN challenge: answer with `Join` carrying a proof over this nonce.
    Challenge {
        /// Fresh random bytes.
        nonce: [u8; 32],
    },
    /// JOIN accepted.
    Welcome {
        /// The app's id.
        app: AppId,
        /// This PM instance's random id (names same-process hand-overs).
        pool: u64,
        /// The PM's directory on the global file system where producers hand over the
        /// files of offers the pool keeps after their withdraw (see
        /// `keep` of [`ToPm::Withdraw`]); `None`: it keeps none.
        keep: Option<std::sync::Arc<str>>,
        /// How long the PM keeps an offer for the holders of its leases after it revoked
        /// them (its `--lease-grace`): a lease's memory copied within half of it from the
        /// lease's take was still offered (see [`ToPm::Took`]).
        lease_grace: std::time::Duration,
    },
    /// LEAVE accepted; the PM closes the connection after this.
    Bye,
    /// An operation on `cdo` completed (`Seal`, `Offer`, `Require`, `Retract`, `Withdraw`,
    /// `Dispose` asking for an answer; a `Demand` completes with a `Ticket` or `Ready`).
    Done {
        /// The operation.
        op: Op,
        /// The CDO.
        cdo: CdoId,
    },
    /// Several operations of one kind completed, in this order (the PM's driver packs runs
    /// of `Done` into one message).
    DoneMany {
        /// The operation.
        op: Op,
        /// The CDOs.
        cdos: Vec<CdoId>,
    },
    /// Answers [`ToPm::Discard`]: how many kept CDOs of the name were ended.
    Discarded {
        /// The app's number for the call.
        local: u64,
        /// How many.
        count: u64,
    },
    /// Write offered `cdo` whole to a file under the GFS directory the app announced, and
    /// answer [`ToPm::Spilled`]: a consumer of the same directory that shares no network
    /// with the app reads it from there (rather than through the PM's stream).
    Spill {
        /// The offered CDO.
        cdo: CdoId,
    },
    /// Fetch the CDO from `source`, then report `TransferDone`.
    Ticket {
        /// The transfer.
        transfer: TransferId,
        /// The consumer's CDO.
        cdo: CdoId,
        /// Where and how to get the bytes.
        source: Source,
        /// The offer's sealed attributes, which the consumer's CDO takes, without the
        /// built-in name and size: the consumer knows both (its CDO's name, the source's
        /// length) and adds them, which spares the PM's hot path three strings per ticket.
        attributes: Attributes,
        /// Whose bytes these are: the providing application's `component:index`, which the
        /// consumer's CDO carries as the built-in attribute `.maestro.core.cdo.provider`.
        provider: std::sync::Arc<str>,
        /// The CDO was demanded when the PM issued this ticket: the transfer's success
        /// completes the demand at the consumer, and no [`FromPm::Ready`] follows it (one
        /// round trip less per demand). `false` for a ticket of a `Require`: a demand
        /// sent later is answered by `Ready`.
        completes_demand: bool,
    },
    /// The lease's offer is going (withdrawn, its provider gone, or demands are to be
    /// held for acknowledgements): answer with [`ToPm::Release`] unless the lease was
    /// used already ([`ToPm::UseLease`] sent).
    Revoke {
        /// The lease.
        lease: TransferId,
    },
    /// A demanded CDO is local: it already was when the demand came, or the transfer of a
    /// ticket issued before the demand completed.
    Ready {
        /// The CDO.
        cdo: CdoId,
    },
    /// To a provider: send `len` bytes at `offset` of offered `cdo` for a stream transfer.
    Serve {
        /// The transfer.
        transfer: TransferId,
        /// The provider's CDO.
        cdo: CdoId,
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// To a consumer: bytes of a stream transfer (the provider's [`ToPm::Chunk`], relayed).
    Chunk(Chunk),
    /// A `Subscribe` succeeded.
    Subscribed {
        /// The app's handle from `Subscribe`.
        local: u64,
        /// The subscription's id.
        sub: SubId,
    },
    /// An event of subscription `sub`.
    Event {
        /// The subscription.
        sub: SubId,
        /// The event.
        event: EventBody,
        /// With an offer's event, to a subscriber that may demand it: what a demand of a
        /// CDO of that name needs, granted before it is made (see [`Grant`]).
        lease: Option<Box<Grant>>,
    },
    /// The acknowledgement of event `serial` did not come in time: the operation went on.
    AckTooLate {
        /// The subscription.
        sub: SubId,
        /// The event's serial.
        serial: u64,
    },
    /// An operation was refused.
    Refused {
        /// The operation.
        op: Op,
        /// The CDO concerned, if any (for transfer messages: the transfer).
        cdo: Option<CdoId>,
        /// Why.
        why: Refusal,
    },
    /// A group demanded with [`ToPm::DemandGroup`] is here: its members are the CDOs
    /// `first`, `first + 1`, ... named `names` (in the producer's order); their tickets
    /// follow, and each completes as a demand does.
    GroupMembers {
        /// The consumer's group CDO.
        group: CdoId,
        /// The members' names.
        names: Vec<String>,
        /// The group's attributes (with the built-in name).
        #[serde(with = "crate::attr::plain")]
        attributes: Attributes,
    },
    /// The answer to an observer's [`ToPm::Query`].
    View {
        /// The query's id.
        id: u64,
        /// The answer.
        view: Box<crate::view::View>,
    },
    /// The PM did not keep the bytes offer `cdo` carried (the PM's budget for them or the
    /// app's share of it is full): the offer stands, consumers get its bytes out of the
    /// provider's memory. The app sends its next offers without their bytes for a while
    /// (see [`crate::client::INLINE_PAUSE`]), which would only be dropped again.
    BytesDropped {
        /// The offer whose bytes were dropped.
        cdo: CdoId,
    },
}

/// Most leases one [`ToPm::Release`] names.
pub const MAX_RELEASE: usize = 4096;

/// Packs each run of two or more `Done` answers of one operation into one `DoneMany`,
/// keeping the order of everything else: a pipelining producer gets one answer per batch.
/// In place: a driver packs the same buffer round after round, with no allocation but a
/// `DoneMany`'s list, made once at the run's length (grown by doubling it cost a round of
/// hundreds of offers several reallocations).
pub fn pack_done(batch: &mut Vec<FromPm>) {
    let done_of = |m: &FromPm| match m {
        FromPm::Done { op, cdo } => Some((*op, *cdo)),
        _ => None,
    };
    // Messages before `kept` are the packed batch; those from `kept` to `i` are spent.
    let (mut kept, mut i) = (0, 0);
    while i < batch.len() {
        let op = done_of(&batch[i]).map(|(op, _)| op);
        let run = op.map_or(1, |op| {
            batch[i..]
                .iter()
                .take_while(|m| done_of(m).is_some_and(|(o, _)| o == op))
                .count()
        });
        match op {
            Some(op) if run >= 2 => {
                let cdos = batch[i..i + run]
                    .iter()
                    .filter_map(|m| done_of(m).map(|(_, cdo)| cdo))
                    .collect();
                batch[kept] = FromPm::DoneMany { op, cdos };
            }
            _ => batch.swap(kept, i),
        }
        kept += 1;
        i += run;
    }
    batch.truncate(kept);
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;
