//! The wire protocol between applications and the pool manager (PM).
//!
//! Messages are serde enums ([`ToPm`], [`FromPm`]) encoded with postcard (compact, varint)
//! and carried in frames: `b"MSTR"`, a protocol version byte, a little-endian `u32` payload
//! length, then the payload, which is a batch of messages (`Vec`), so many small operations
//! travel in one frame. Frames larger than [`MAX_FRAME`] are refused. Decoding never panics:
//! every malformed frame is a [`FrameError`] saying what was wrong, and the driver closes that
//! one connection.

use fabric_types::{Address, MemoryFile, RemoteRegion};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::attr::Attributes;
use crate::events::{EventKinds, FabricChange, PoolEvent, SubId, SubscribeOptions};
use crate::selector::Expr;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"MSTR";
/// Protocol version carried in every frame (9: observers and their queries, see
/// [`crate::view`]; 8: small CDOs inline; 7: selectors travel flat, see
/// [`crate::selector::Expr`]; 6: apps number their own CDOs, and declares and disposes that
/// cannot be refused go unanswered).
pub const VERSION: u8 = 9;
/// Header size: magic, version, length.
pub const HEADER: usize = 9;
/// Largest payload accepted (16 MiB): CDO data never travels in frames, only metadata.
pub const MAX_FRAME: usize = 16 << 20;

/// An application's id, assigned in [`FromPm::Welcome`]: apps are numbered from 1 in the
/// order they join, at most [`MAX_APP`] over a PM's lifetime.
pub type AppId = u64;
/// A CDO's id: its app's id in the high bits, the app's count of its declarations in the
/// low [`CDO_SEQ_BITS`] (see [`cdo_ids`]). Apps number their own CDOs, so a declare needs
/// no answer: the operations after it name the CDO at once.
pub type CdoId = u64;

/// Bits of a [`CdoId`] that count an app's declarations: 2^40 - 1 CDOs per app (12 days
/// of a million declares a second).
pub const CDO_SEQ_BITS: u32 = 40;

/// The most apps a PM admits over its lifetime (2^24 - 1): the app id must fit above the
/// declaration count in a [`CdoId`].
pub const MAX_APP: AppId = (1 << (64 - CDO_SEQ_BITS)) - 1;

/// The ids app `app` may give its CDOs, in the order it should use them.
///
/// ```
/// use pool_core::proto::{cdo_ids, cdo_owner};
///
/// let ids = cdo_ids(3);
/// assert_eq!(cdo_owner(*ids.start()), 3);
/// assert_eq!(cdo_owner(*ids.end()), 3);
/// assert!(!ids.contains(&(3 << 40)), "the app's id alone names no CDO");
/// ```
pub fn cdo_ids(app: AppId) -> std::ops::RangeInclusive<CdoId> {
    let base = app << CDO_SEQ_BITS;
    base + 1..=base | ((1 << CDO_SEQ_BITS) - 1)
}

/// The app that declared `cdo`.
pub fn cdo_owner(cdo: CdoId) -> AppId {
    cdo >> CDO_SEQ_BITS
}

/// Longest CDO name, in bytes.
pub const MAX_NAME: usize = 4096;

/// Checks a CDO name before it is declared: 1 to [`MAX_NAME`] bytes.
///
/// # Errors
/// [`Refusal::BadName`] otherwise (what the PM would answer).
pub fn check_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(Refusal::BadName);
    }
    Ok(())
}
/// A transfer's id, carried by tickets.
pub type TransferId = u64;

/// Largest piece of CDO data carried by one [`ToPm::Chunk`] / [`FromPm::Chunk`] (the
/// last-resort stream over the control connection).
pub const MAX_CHUNK: u64 = 4 << 20;

/// An application's fabric endpoint, announced once in [`ToPm::Join`]: offers then carry
/// only their region, and the PM hands the endpoint to consumers in tickets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FabricEndpoint {
    /// The libfabric provider name (a reader must use the same provider).
    pub provider: String,
    /// The endpoint's address.
    pub address: Address,
}

/// Where a same-host consumer may copy an app's offered bytes straight out of the app's
/// memory (Linux cross-memory attach, `process_vm_readv`): one copy by the consumer, no
/// work for the provider's progress. Announced in [`Join`] by apps whose offered regions'
/// addresses are virtual addresses (shared-memory providers); the PM passes it on in
/// [`Source::Rma`] when both apps are on one host and read over shared memory.
///
/// The consumer first reads `token` at `token_addr` in process `pid` and compares it: a
/// process id seen from another PID namespace, or reused after the app died, names a
/// process that does not hold the token, and the consumer reads over the fabric instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// The app's process id.
    pub pid: u32,
    /// A random number the app keeps at `token_addr` for its lifetime.
    pub token: u64,
    /// Its address in the app's memory.
    pub token_addr: u64,
}

/// How a same-host consumer took a CDO's bytes straight from the provider's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direct {
    /// Copied them (`process_vm_readv`).
    Copied,
    /// Mapped the provider's memory file: no copy at all.
    Mapped,
}

/// What an offer carries besides its region: the same bytes as registered with each of the
/// app's alternate endpoints, and the memory file holding them (which a consumer on the
/// app's host may map instead of copying, for apps that announce [`ProcessMemory`]).
/// Boxed behind a thin option: most offers have neither, and offers are the PM's hot path
/// (an empty one costs 8 bytes and no allocation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferExtras(Option<Box<Extras>>);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Extras {
    alternates: Vec<RemoteRegion>,
    file: Option<MemoryFile>,
    inline: Option<InlineBytes>,
}

/// A small CDO's bytes carried in its offer and in the tickets of its demands (see
/// [`Source::Inline`]), shared, not copied, between the PM's tickets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineBytes(pub std::sync::Arc<[u8]>);

impl InlineBytes {
    /// Their number.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for InlineBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for InlineBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InlineBytes, D::Error> {
        let bytes: serde_bytes::ByteBuf = Deserialize::deserialize(d)?;
        Ok(InlineBytes(bytes.into_vec().into()))
    }
}

impl OfferExtras {
    /// The regions, in the order of the app's alternate endpoints, and the memory file.
    pub fn new(alternates: Vec<RemoteRegion>, file: Option<MemoryFile>) -> OfferExtras {
        let some = !alternates.is_empty() || file.is_some();
        OfferExtras(some.then(|| {
            Box::new(Extras {
                alternates,
                file,
                inline: None,
            })
        }))
    }

    /// The same, carrying the CDO's bytes too (a small CDO: see [`Source::Inline`]).
    pub fn with_inline(mut self, bytes: impl Into<std::sync::Arc<[u8]>>) -> OfferExtras {
        self.0.get_or_insert_with(Box::default).inline = Some(InlineBytes(bytes.into()));
        self
    }

    /// The bytes the offer carries, if it does.
    pub fn inline(&self) -> Option<&InlineBytes> {
        self.0.as_deref().and_then(|e| e.inline.as_ref())
    }

    /// Takes the carried bytes out (the PM keeps them no longer).
    pub fn take_inline(&mut self) -> Option<InlineBytes> {
        self.0.as_deref_mut().and_then(|e| e.inline.take())
    }

    /// The regions for the alternate endpoints.
    pub fn alternates(&self) -> &[RemoteRegion] {
        self.0.as_deref().map_or(&[], |e| e.alternates.as_slice())
    }

    /// The memory file.
    pub fn file(&self) -> Option<MemoryFile> {
        self.0.as_deref().and_then(|e| e.file)
    }
}

/// What a same-host consumer needs to take an offer straight from the provider's memory:
/// the provider's process and, if the offer lives in one, its memory file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostMemory {
    /// The provider's process, to copy from.
    pub process: ProcessMemory,
    /// The offer's memory file, to map.
    pub file: Option<MemoryFile>,
}

/// How a consumer gets a ticketed CDO's bytes; the PM chooses by locality (transport
/// planning): same process, then a common RMA provider (shm only within a node), else the
/// last-resort stream relayed over the control connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// Read `region` from the provider's `endpoint` with RMA.
    Rma {
        /// The provider's endpoint (shared with the PM's table: tickets are its hot path).
        endpoint: std::sync::Arc<FabricEndpoint>,
        /// The offered region (registered with that endpoint).
        region: RemoteRegion,
        /// Which of the consumer's endpoints reads: 0 its first (on its chosen NIC), `i`
        /// its alternate `i - 1` (another network).
        via: u8,
        /// Where the consumer may instead copy the bytes straight out of the provider's
        /// memory, or map them (same host, shared memory; `region.addr` is then the address
        /// in the provider's memory): see [`ProcessMemory`]. Boxed: tickets travel through the
        /// PM's queues by value.
        memory: Option<Box<HostMemory>>,
    },
    /// The provider is in this very process: take its buffer without a copy.
    SameProcess {
        /// The PM instance (see [`FromPm::Welcome`]).
        pool: u64,
        /// The providing app.
        app: AppId,
        /// The provider's CDO.
        cdo: CdoId,
        /// Its size.
        len: u64,
    },
    /// No common RMA provider: fetch `len` bytes in chunks with [`ToPm::Fetch`].
    Stream {
        /// The CDO's size.
        len: u64,
    },
    /// A small CDO: its bytes are here, in the ticket (the offer carried them to the PM).
    Inline {
        /// The bytes.
        bytes: InlineBytes,
    },
}

impl Source {
    /// The CDO's size in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Source::Rma { region, .. } => region.len,
            Source::SameProcess { len, .. } | Source::Stream { len } => *len,
            Source::Inline { bytes } => bytes.len() as u64,
        }
    }

    /// True for a 0-byte (synchronisation) CDO.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The transport's name, for logs and events.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Rma { .. } => "rma",
            Source::SameProcess { .. } => "same-process",
            Source::Stream { .. } => "stream",
            Source::Inline { .. } => "inline",
        }
    }
}

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
    /// An observer's question.
    Query,
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
            Op::Query => "query",
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
    /// An app, or a read-only observer of the pool (see [`crate::view`]).
    pub role: Role,
    /// The proof.
    pub proof: Vec<u8>,
}

/// The NICs of an app's endpoints, as [`Join`] announces them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nics {
    /// The libfabric domain of each endpoint, the first then the alternates.
    pub names: Vec<String>,
    /// Why the first (e.g. `ib0, chosen by the PMIx host`), where the app knows.
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
    /// Cancel a require (or a waiting demand).
    Retract {
        /// The CDO.
        cdo: CdoId,
    },
    /// Take an offer back; acknowledged once no transfer reads from it.
    Withdraw {
        /// The CDO.
        cdo: CdoId,
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
    /// A transfer the PM ticketed to this app finished (`error` set on failure).
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
            | ToPm::DemandGroup { group: cdo, .. }
            | ToPm::Retract { cdo }
            | ToPm::Withdraw { cdo }
            | ToPm::Dispose { cdo, .. }
            | ToPm::Declare { cdo, .. } => Some(*cdo),
            _ => None,
        }
    }

    /// Which operation this message is.
    pub fn op(&self) -> Op {
        match self {
            ToPm::Join(_) => Op::Join,
            ToPm::Leave => Op::Leave,
            ToPm::Declare { .. } => Op::Declare,
            ToPm::Seal { .. } => Op::Seal,
            ToPm::Offer { .. } | ToPm::SealOffer { .. } => Op::Offer,
            ToPm::Require { .. } => Op::Require,
            ToPm::Demand { .. } | ToPm::DemandGroup { .. } => Op::Demand,
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
    /// The PMIx credential is missing or did not validate (the reason is attached).
    BadCredential(String),
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
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotJoined => f.write_str("not joined: send Join first"),
            Refusal::DuplicateJoin => f.write_str("already joined on this connection"),
            Refusal::BadProof => {
                f.write_str("join refused: wrong or missing proof of the workflow secret")
            }
            Refusal::BadCredential(why) => write!(
                f,
                "join refused: the PMIx credential did not validate ({why}); start every process of the workflow under the same PMIx host"
            ),
            Refusal::WrongWorkflow => {
                f.write_str("join refused: this pool manager serves another workflow")
            }
            Refusal::UnknownCdo => f.write_str("unknown CDO id for this application"),
            Refusal::BadCdoId => f.write_str(
                "declared CDO id is not this application's next one (ids come from its app id, see cdo_ids) or is in use",
            ),
            Refusal::TooManyApps => write!(
                f,
                "join refused: this pool manager has admitted {MAX_APP} applications; start a new one"
            ),
            Refusal::WrongState { op, state } => {
                write!(f, "{op} is not allowed on a CDO that is {state}")
            }
            Refusal::BadName => f.write_str("CDO names must be 1 to 4096 bytes"),
            Refusal::NoProvider => {
                f.write_str("no provider of this CDO is left (they left or died)")
            }
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
        event: Box<PoolEvent>,
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
}

/// Packs each run of two or more `Done` answers of one operation into one `DoneMany`,
/// keeping the order of everything else: a pipelining producer gets one answer per batch.
pub fn pack_done(batch: Vec<FromPm>) -> Vec<FromPm> {
    let mut out: Vec<FromPm> = Vec::with_capacity(batch.len());
    for m in batch {
        match (out.last_mut(), m) {
            (Some(FromPm::DoneMany { op, cdos }), FromPm::Done { op: o, cdo }) if *op == o => {
                cdos.push(cdo);
            }
            (Some(last @ FromPm::Done { .. }), FromPm::Done { op: o, cdo }) => match last {
                FromPm::Done { op, cdo: first } if *op == o => {
                    *last = FromPm::DoneMany {
                        op: o,
                        cdos: vec![*first, cdo],
                    };
                }
                _ => out.push(FromPm::Done { op: o, cdo }),
            },
            (_, m) => out.push(m),
        }
    }
    out
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame does not start with `MSTR`.
    #[error("not a pool frame (bad magic {0:02x?}); is the peer a Maestro pool process?")]
    BadMagic([u8; 4]),
    /// Another protocol version.
    #[error(
        "protocol version {got}, this build speaks {VERSION}; run the same maestro version everywhere"
    )]
    Version {
        /// The peer's version.
        got: u8,
    },
    /// The announced payload exceeds [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// The payload is not a valid message batch.
    #[error("malformed payload: {0}")]
    Payload(String),
}

/// Encodes a batch of messages as one frame.
///
/// # Errors
/// [`FrameError::TooLarge`] if the batch encodes to more than [`MAX_FRAME`] bytes.
pub fn encode<T: Serialize>(batch: &[T]) -> Result<Vec<u8>, FrameError> {
    let payload = postcard::to_allocvec(batch).map_err(|e| FrameError::Payload(e.to_string()))?;
    if payload.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(payload.len()));
    }
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Encodes a batch as as few frames as fit under [`MAX_FRAME`] (halving the batch until each
/// part fits).
///
/// # Errors
/// [`FrameError::TooLarge`] if a single message does not fit in a frame.
pub fn encode_split<T: Serialize>(batch: &[T]) -> Result<Vec<Vec<u8>>, FrameError> {
    match encode(batch) {
        Ok(frame) => Ok(vec![frame]),
        Err(FrameError::TooLarge(_)) if batch.len() > 1 => {
            let (a, b) = batch.split_at(batch.len() / 2);
            let mut frames = encode_split(a)?;
            frames.extend(encode_split(b)?);
            Ok(frames)
        }
        Err(e) => Err(e),
    }
}

/// Reads the payload length from a frame header (the first [`HEADER`] bytes).
///
/// # Errors
/// Bad magic, version or size.
pub fn payload_len(header: &[u8; HEADER]) -> Result<usize, FrameError> {
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if header[4] != VERSION {
        return Err(FrameError::Version { got: header[4] });
    }
    let len = u32::from_le_bytes([header[5], header[6], header[7], header[8]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes a payload (the bytes after the header) into a batch.
///
/// # Errors
/// [`FrameError::Payload`] with postcard's reason.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<Vec<T>, FrameError> {
    postcard::from_bytes(payload).map_err(|e| FrameError::Payload(e.to_string()))
}

/// What an unjoined connection may send: its first frame holds exactly one [`ToPm::Join`].
/// Encoded as [`ToPm`] is (the variant index of `Join` is 0 in both), so decoding a first
/// frame as this type refuses every other message before any of its fields are read.
#[derive(Deserialize)]
enum FirstMessage {
    Join(Box<Join>),
}

/// Decodes the first frame's payload of a connection that has not joined: one
/// [`ToPm::Join`] and nothing else, so no other message type (and none of their nested
/// values) is ever decoded from a peer that has not proven the workflow secret.
///
/// # Errors
/// [`FrameError::Payload`] for anything but a lone, well-formed JOIN.
pub fn decode_join(payload: &[u8]) -> Result<Box<Join>, FrameError> {
    let batch = decode::<FirstMessage>(payload)
        .map_err(|e| FrameError::Payload(format!("the first frame must hold one JOIN ({e})")))?;
    match <[FirstMessage; 1]>::try_from(batch) {
        Ok([FirstMessage::Join(j)]) => Ok(j),
        Err(v) => Err(FrameError::Payload(format!(
            "the first frame must hold one JOIN, not {} messages",
            v.len()
        ))),
    }
}

/// Splits complete frames off the front of a byte stream buffer and hands each message they
/// hold to `each`, in order, with no batch allocated in between; leaves a partial frame in
/// `buf`. For drivers reading from sockets.
///
/// # Errors
/// The first bad frame (the connection should then be closed; messages before it in that
/// frame may have been handed over).
pub fn drain_frames<T: DeserializeOwned>(
    buf: &mut Vec<u8>,
    mut each: impl FnMut(T),
) -> Result<(), FrameError> {
    let mut at = 0;
    while buf.len() - at >= HEADER {
        let mut header = [0u8; HEADER];
        header.copy_from_slice(&buf[at..at + HEADER]);
        let len = payload_len(&header)?;
        if buf.len() - at - HEADER < len {
            break;
        }
        decode_each(&buf[at + HEADER..at + HEADER + len], &mut each)?;
        at += HEADER + len;
    }
    buf.drain(..at);
    Ok(())
}

/// Decodes a payload's batch message by message (postcard: a varint count, then the
/// messages), as [`decode`] does into a `Vec`.
fn decode_each<T: DeserializeOwned>(
    payload: &[u8],
    each: &mut impl FnMut(T),
) -> Result<(), FrameError> {
    let bad = |e: postcard::Error| FrameError::Payload(e.to_string());
    let (count, mut rest) = postcard::take_from_bytes::<u64>(payload).map_err(bad)?;
    for _ in 0..count {
        let (msg, after) = postcard::take_from_bytes::<T>(rest).map_err(bad)?;
        each(msg);
        rest = after;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::{AttrValue, Attributes};

    #[test]
    fn runs_of_done_are_packed_in_order() {
        let done = |op, cdo| FromPm::Done { op, cdo };
        let batch = vec![
            done(Op::Offer, 1),
            done(Op::Offer, 2),
            done(Op::Offer, 3),
            FromPm::Ready { cdo: 4 },
            done(Op::Offer, 5),
            done(Op::Seal, 6),
            done(Op::Seal, 7),
            done(Op::Offer, 8),
        ];
        assert_eq!(
            pack_done(batch),
            [
                FromPm::DoneMany {
                    op: Op::Offer,
                    cdos: vec![1, 2, 3]
                },
                FromPm::Ready { cdo: 4 },
                done(Op::Offer, 5),
                FromPm::DoneMany {
                    op: Op::Seal,
                    cdos: vec![6, 7]
                },
                done(Op::Offer, 8),
            ]
        );
        assert!(pack_done(Vec::new()).is_empty());
    }

    /// Messages are moved through queues and channels by value: the rare big ones (JOIN,
    /// subscriptions, events) are boxed so the frequent ones stay small. The largest
    /// frequent one is `SealOffer` (CDO, attributes, region, the thin extras): 72 bytes
    /// with the tag; boxing its attributes instead would cost an allocation per offer. From
    /// the PM the largest is `Ticket` (endpoint, region, attributes, the boxed
    /// process-memory announcement): 136 bytes.
    #[test]
    fn messages_stay_small() {
        assert!(
            std::mem::size_of::<ToPm>() <= 72,
            "{}",
            std::mem::size_of::<ToPm>()
        );
        assert!(
            std::mem::size_of::<FromPm>() <= 136,
            "{}",
            std::mem::size_of::<FromPm>()
        );
    }

    fn sample() -> Vec<ToPm> {
        let mut attributes = Attributes::default();
        attributes.insert(".user.step".into(), AttrValue::Int(2));
        vec![
            ToPm::Declare {
                cdo: 7,
                name: "temperature".into(),
            },
            ToPm::Seal { cdo: 7, attributes },
            ToPm::Offer {
                cdo: 7,
                region: RemoteRegion {
                    addr: 0,
                    key: 9,
                    len: 4096,
                },
                extras: OfferExtras::new(
                    vec![RemoteRegion {
                        addr: 0,
                        key: 10,
                        len: 4096,
                    }],
                    Some(MemoryFile {
                        fd: 12,
                        inode: std::num::NonZeroU64::new(99).expect("non-zero"),
                    }),
                ),
            },
            ToPm::Join(Box::new(Join {
                workflow: "wf".into(),
                component: "c".into(),
                index: -1,
                host: "n1".into(),
                process: 42,
                endpoint: Some(FabricEndpoint {
                    provider: "tcp;ofi_rxm".into(),
                    address: Address(vec![1, 2, 3]),
                }),
                alternates: Vec::new(),
                networks: vec![Some("10.0.0.1/24".parse().expect("subnet"))],
                memory: Some(ProcessMemory {
                    pid: 4242,
                    token: 7,
                    token_addr: 0x7fff_0000_1000,
                }),
                credential: None,
                nics: Nics::default(),
                role: Role::App,
                proof: vec![0; 32],
            })),
            ToPm::TransferDone {
                transfer: 3,
                error: Some("peer gone".into()),
                direct: None,
            },
        ]
    }

    #[test]
    fn batches_round_trip_and_stream_split() {
        let a = encode(&sample()).expect("encode");
        let b = encode(&[ToPm::Leave]).expect("encode");
        let mut stream = [a.clone(), b].concat();
        stream.extend_from_slice(&a[..5]); // a partial third frame
        let mut got: Vec<ToPm> = Vec::new();
        drain_frames(&mut stream, |m| got.push(m)).expect("decode");
        assert_eq!(got.len(), 6);
        assert_eq!(&got[..5], &sample()[..]);
        assert_eq!(got[5], ToPm::Leave);
        assert_eq!(stream, a[..5]);
    }

    #[test]
    fn large_batches_split_into_frames_that_fit() {
        let chunk = |i: u64| {
            ToPm::Chunk(Chunk {
                transfer: i,
                offset: 0,
                data: vec![i as u8; 3 << 20],
            })
        };
        let batch: Vec<ToPm> = (0..12).map(chunk).collect();
        assert!(matches!(encode(&batch), Err(FrameError::TooLarge(_))));
        let frames = encode_split(&batch).expect("split");
        assert!(frames.len() >= 3, "{} frames", frames.len());
        let mut stream = frames.concat();
        let mut got: Vec<ToPm> = Vec::new();
        drain_frames(&mut stream, |m| got.push(m)).expect("decode");
        assert_eq!(got, batch);
        let huge = ToPm::Chunk(Chunk {
            transfer: 1,
            offset: 0,
            data: vec![0; MAX_FRAME],
        });
        assert!(matches!(
            encode_split(&[huge]),
            Err(FrameError::TooLarge(_))
        ));
    }

    #[test]
    fn bad_frames_are_errors() {
        let good = encode(&[ToPm::Leave]).expect("encode");
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            drain_frames::<ToPm>(&mut bad, drop),
            Err(FrameError::BadMagic(_))
        ));
        let mut v = good.clone();
        v[4] = 99;
        assert_eq!(
            drain_frames::<ToPm>(&mut v, drop),
            Err(FrameError::Version { got: 99 })
        );
        let mut big = good.clone();
        big[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            drain_frames::<ToPm>(&mut big, drop),
            Err(FrameError::TooLarge(_))
        ));
        let mut junk = encode(&[ToPm::Leave]).expect("encode");
        junk[HEADER] = 200; // an impossible enum tag
        assert!(matches!(
            drain_frames::<ToPm>(&mut junk, drop),
            Err(FrameError::Payload(_))
        ));
    }

    #[test]
    fn random_bytes_never_panic() {
        // A deterministic generator: many short and long garbage streams.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..20_000 {
            let len = (round % 64) + 1;
            let mut buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if round % 3 == 0 {
                // A valid header over random payload.
                let mut h = MAGIC.to_vec();
                h.push(VERSION);
                h.extend_from_slice(&((len as u32).to_le_bytes()));
                buf = [h, buf].concat();
            }
            let _ = drain_frames::<ToPm>(&mut buf, drop);
            let _ = decode::<FromPm>(&buf);
        }
    }

    #[test]
    fn a_first_frame_is_a_lone_join_or_nothing() {
        let join = sample()
            .into_iter()
            .find(|m| matches!(m, ToPm::Join(_)))
            .expect("the sample has a JOIN");
        let ToPm::Join(j) = &join else {
            unreachable!("found above")
        };
        let frame = encode(std::slice::from_ref(&join)).expect("encodes");
        assert_eq!(&decode_join(&frame[HEADER..]).expect("a JOIN"), j);
        let two = encode(&[join.clone(), ToPm::Leave]).expect("encodes");
        assert!(decode_join(&two[HEADER..]).is_err());
        let none = encode::<ToPm>(&[]).expect("encodes");
        assert!(decode_join(&none[HEADER..]).is_err());
        let other = encode(&[ToPm::Leave]).expect("encodes");
        let e = decode_join(&other[HEADER..]).expect_err("not a JOIN");
        assert!(e.to_string().contains("one JOIN"), "{e}");
        // The frame that overflowed the PM's stack before protocol 7's flat selectors: a
        // Subscribe whose selector nests 20,000 nots. Refused before JOIN, and harmless
        // (an error, no recursion) from a joined app.
        let mut payload = vec![1u8, 14, 0, 0];
        payload.extend(std::iter::repeat_n(6u8, 20_000));
        payload.extend([0u8; 4]);
        assert!(decode_join(&payload).is_err());
        let _ = decode::<ToPm>(&payload);
    }
}
