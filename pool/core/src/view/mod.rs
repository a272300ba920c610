//! What an *observer* sees of the pool: the questions it may ask ([`Query`]) and the
//! answers ([`View`]): the PM and its apps ([`Status`]), the CDOs ([`CdoPage`]), transfers
//! in flight and recent ([`Transfers`]) and the traffic report per NIC and provider
//! ([`Fabric`]).
//!
//! An observer joins like an app (JOIN with [`crate::proto::Role::Observer`] and a proof of
//! the workflow secret) but is not an app: it is not counted, raises no events, and every
//! operation other than [`crate::proto::ToPm::Query`] is refused. Every answer is bounded:
//! a CDO listing is paged ([`MAX_PAGE`] entries, at most [`MAX_SCAN`] ids looked at per
//! page) so a pool of millions is listed without stopping the PM, and lists of apps and
//! transfers are capped ([`MAX_LISTED`]) with their totals given.
//!
//! These types are also the stable JSON schema of `maestro pool --json`
//! (`docs/pool-view.schema.json`): field names are part of the interface; fields are added,
//! never renamed or removed, within one protocol version.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attr::Attributes;
use crate::ids::{AppId, CdoId, TransferId};
use crate::selector::Expr;

mod merge;

/// Most CDOs in one page of [`Query::Ls`].
pub const MAX_PAGE: u32 = 1000;
/// Most CDO ids one [`Query::Ls`] looks at: a page may come back short (with
/// [`CdoPage::next`]) after this many, so one query never holds the PM long.
pub const MAX_SCAN: u64 = 65_536;
/// Most apps, transfers or NICs listed in one answer (the totals say how many exist).
pub const MAX_LISTED: usize = 4096;
/// Finished transfers remembered for [`Transfers::recent`].
pub const RECENT_TRANSFERS: usize = 256;
/// Fabric events remembered for [`Fabric::events`].
pub const RECENT_FABRIC_EVENTS: usize = 64;

/// A question of an observer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Query {
    /// The PM, its apps and CDO counts.
    Status,
    /// A page of CDOs.
    Ls(Ls),
    /// Transfers in flight and recent ones.
    Transfers,
    /// Traffic per NIC and provider, links, each app's NIC.
    Fabric,
}

/// A page of CDOs: those after `after` (in id order) that match `selector`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ls {
    /// Only CDOs whose attributes (with the built-in name and size) match; `None`: all.
    pub selector: Option<Box<Expr>>,
    /// Start after this CDO id (`None`: from the first); [`CdoPage::next`] of the previous
    /// page.
    pub after: Option<CdoId>,
    /// Most CDOs in the page (at most [`MAX_PAGE`]).
    pub limit: u32,
    /// Include each CDO's attributes.
    pub attributes: bool,
}

/// An answer to an observer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum View {
    /// Answers [`Query::Status`].
    Status(Status),
    /// Answers [`Query::Ls`].
    Cdos(CdoPage),
    /// Answers [`Query::Transfers`].
    Transfers(Transfers),
    /// Answers [`Query::Fabric`].
    Fabric(Fabric),
}

/// The pool manager and its apps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Status {
    /// The workflow served.
    pub workflow: String,
    /// The PM's protocol version.
    pub protocol: u8,
    /// Since the PM started, in milliseconds.
    pub uptime_ms: u64,
    /// Operations handled since the start, by kind (`declare`, `offer`, ...).
    pub operations: BTreeMap<String, u64>,
    /// Operations per second over the last second or more.
    pub operations_per_second: f64,
    /// The PM's resident memory in bytes, where the driver knows it.
    pub memory_bytes: Option<u64>,
    /// Bytes of small CDOs' data the PM holds (inline offers).
    pub inline_bytes: u64,
    /// Joined apps.
    pub app_count: u64,
    /// Observers connected now (this one included).
    pub observer_count: u64,
    /// The apps (at most [`MAX_LISTED`]), by id.
    pub apps: Vec<AppView>,
    /// Live CDOs by state, every state (0 included): `declared`, `sealed`, `offered`,
    /// `being withdrawn`, `withdrawn`, `required`, `in transfer`, `local`, and `kept` (offered
    /// by the pool after their producer handed their file over; not counted as `offered`).
    pub cdos: BTreeMap<String, u64>,
    /// Bytes the PM holds for the CDOs it keeps (their metadata; the data is in files).
    pub kept_bytes: u64,
    /// Subscriptions open now.
    pub subscriptions: u64,
    /// Transfers in flight.
    pub transfers_in_flight: u64,
    /// This PM's generation (its instance: a PM that took over from another has its own).
    #[serde(default)]
    pub generation: u64,
    /// Milliseconds left of the grace period of a PM that took over from one that is
    /// gone (only apps of that one join meanwhile, reclaiming what they held); `None`:
    /// none.
    #[serde(default)]
    pub grace_ms: Option<u64>,
    /// Where the standby pool managers watching this one run (`maestro pm --standby-for`).
    #[serde(default)]
    pub standbys: Vec<String>,
    /// The pool's managers, by shard (docs/developers/shards.md): one PM tells its own
    /// place; the status of a sharded pool (its shards' merged: [`View::merge`]) lists
    /// every shard.
    #[serde(default)]
    pub shards: Vec<ShardStatus>,
}

/// One manager of a pool as its status tells it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ShardStatus {
    /// Its shard (0 numbers the apps).
    pub index: u16,
    /// How many shards the pool has.
    pub count: u16,
    /// Live CDOs it holds (those whose names it is the home of, and the kept ones).
    pub cdos: u64,
    /// Operations per second it handled over the last second or more.
    pub operations_per_second: f64,
    /// Its resident memory in bytes, where its driver knows it.
    pub memory_bytes: Option<u64>,
    /// Its generation (a manager that took over the shard has its own).
    pub generation: u64,
}

/// One app as the PM knows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct AppView {
    /// Its id in this pool.
    pub id: AppId,
    /// Component name.
    pub component: String,
    /// Component index (the rank, usually).
    pub index: i64,
    /// Host name.
    pub host: String,
    /// The job it runs in, as its launcher names it (the PMIx namespace; empty: none).
    #[serde(default)]
    pub job: String,
    /// Its process id, where it announced one (same-host copies).
    pub pid: Option<u32>,
    /// The libfabric provider of its first endpoint (`None`: data by stream).
    pub provider: Option<String>,
    /// The address of its first endpoint (IP where it has one).
    pub address: Option<String>,
    /// The NIC (libfabric domain) of its first endpoint.
    pub nic: Option<String>,
    /// Why that NIC, as the app was told.
    pub nic_reason: Option<String>,
    /// When it joined, in nanoseconds since the Unix epoch.
    pub joined_unix_ns: i128,
    /// Its live CDOs.
    pub cdos: u64,
    /// Offers it made.
    pub offered: u64,
    /// Demands it made.
    pub demanded: u64,
    /// Bytes others received from its offers (transfers that completed).
    pub bytes_sent: u64,
    /// Bytes it received (transfers that completed).
    pub bytes_received: u64,
    /// Leaving (LEAVE sent, waiting for its offers to be released).
    pub leaving: bool,
}

/// One CDO.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CdoView {
    /// Its id.
    pub id: CdoId,
    /// Its name.
    pub name: String,
    /// The app that declared it (`component:index`).
    pub app: String,
    /// Its size, once offered.
    pub size: Option<u64>,
    /// Its state (see [`Status::cdos`]).
    pub state: String,
    /// Offered CDOs: the app; a consumer's CDO in transfer: the app it comes from.
    pub providers: Vec<String>,
    /// Offered CDOs: consumers of its name waiting for a transfer.
    pub waiting: u64,
    /// Seconds since it was declared.
    pub age_s: u64,
    /// Its attributes (with the built-in name and size), when asked for.
    #[serde(with = "crate::attr::plain")]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "BTreeMap<String, serde_json::Value>")
    )]
    pub attributes: Attributes,
}

/// A page of CDOs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CdoPage {
    /// The CDOs, by id.
    pub cdos: Vec<CdoView>,
    /// Where the next page starts ([`Ls::after`]); `None`: this was the last.
    pub next: Option<CdoId>,
    /// Live CDOs in the pool (all, matching or not).
    pub total: u64,
}

/// How a transfer moves the bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub enum Transport {
    /// Consumer and provider share a process: the provider's buffer itself.
    #[default]
    SameProcess,
    /// The bytes came with the ticket (a small CDO whose offer carried them).
    Inline,
    /// Libfabric RMA read.
    Rma,
    /// Copied straight from the provider's memory (same host).
    Copy,
    /// The provider's memory file mapped (same host, no copy).
    Map,
    /// Relayed in pieces over the control connections.
    Stream,
    /// Written by the provider to a file on a global file system, read by the consumer.
    Gfs,
}

impl Transport {
    /// Every transport, in discriminant order.
    pub const ALL: [Transport; 7] = [
        Transport::SameProcess,
        Transport::Inline,
        Transport::Rma,
        Transport::Copy,
        Transport::Map,
        Transport::Stream,
        Transport::Gfs,
    ];

    /// Its name in views and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Transport::SameProcess => "same-process",
            Transport::Inline => "inline",
            Transport::Rma => "rma",
            Transport::Copy => "copy",
            Transport::Map => "map",
            Transport::Stream => "stream",
            Transport::Gfs => "gfs",
        }
    }
}

/// One transfer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct TransferView {
    /// Its id.
    pub id: TransferId,
    /// The CDO's name.
    pub name: String,
    /// The provider (`component:index`).
    pub from: String,
    /// The consumer (`component:index`).
    pub to: String,
    /// How.
    pub transport: Transport,
    /// The libfabric provider, for RMA, copies and maps.
    pub provider: Option<String>,
    /// The provider side's NIC (libfabric domain), for RMA, copies and maps.
    pub nic: Option<String>,
    /// Bytes.
    pub bytes: u64,
    /// When it was ticketed, ns since the Unix epoch.
    pub started_unix_ns: i128,
    /// In flight: for how long so far; finished: how long it took (ticket to done), µs.
    pub elapsed_us: u64,
    /// Finished transfers: `true` if the bytes arrived.
    pub ok: Option<bool>,
    /// Why it failed.
    pub error: Option<String>,
}

/// Transfers in flight and recent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Transfers {
    /// In flight (at most [`MAX_LISTED`]), oldest first.
    pub in_flight: Vec<TransferView>,
    /// How many are in flight.
    pub in_flight_total: u64,
    /// The last [`RECENT_TRANSFERS`] that finished, newest last.
    pub recent: Vec<TransferView>,
    /// Transfers that completed since the PM started.
    pub completed: u64,
    /// Transfers that failed since the PM started.
    pub failed: u64,
}

/// Traffic through one NIC with one provider, as seen by the PM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct NicTraffic {
    /// The host of the NIC.
    pub host: String,
    /// The NIC (libfabric domain; `stream` and `inline` for bytes the PM relayed or
    /// handed over, `process` for same-process hand-overs).
    pub nic: String,
    /// The libfabric provider (empty for `stream`, `inline`, `process`).
    pub provider: String,
    /// Bytes read from offers behind this NIC (completed transfers).
    pub bytes_out: u64,
    /// Bytes read through this NIC by consumers (completed transfers).
    pub bytes_in: u64,
    /// Completed transfers out.
    pub transfers_out: u64,
    /// Completed transfers in.
    pub transfers_in: u64,
    /// Failed transfers on either side.
    pub failures: u64,
}

/// Bytes and transfers of one transport.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct TransportTraffic {
    /// Completed transfers.
    pub transfers: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Failed transfers.
    pub failures: u64,
}

/// The NIC an app was given, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct AppNic {
    /// The app's id.
    pub app: AppId,
    /// `component:index`.
    pub label: String,
    /// Host.
    pub host: String,
    /// The NICs (libfabric domains) of its endpoints, the first endpoint's first: `shm`
    /// for the same-host endpoint an app opens beside its network NIC.
    pub nics: Vec<String>,
    /// The libfabric provider of its first endpoint.
    pub provider: Option<String>,
    /// The address of its first endpoint.
    pub address: Option<String>,
    /// Which network NIC the app was given and why (e.g. `eth0, chosen by the PMIx
    /// host`), where it knows: it names a NIC of [`AppNic::nics`], not always the first.
    pub reason: Option<String>,
    /// The libfabric provider of each endpoint, in the order of [`AppNic::nics`].
    #[serde(default)]
    pub providers: Vec<String>,
}

/// A fabric event the PM saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct FabricEvent {
    /// When, ns since the Unix epoch.
    pub unix_ns: i128,
    /// What happened.
    pub detail: String,
}

/// The traffic report: what this workflow moved over which NIC and provider, how, and
/// what the fabric did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Fabric {
    /// Per host, NIC and provider (at most [`MAX_LISTED`]).
    pub nics: Vec<NicTraffic>,
    /// Per transport.
    pub transports: BTreeMap<String, TransportTraffic>,
    /// Networks of links reported down now, and switch links of the fabric beyond the
    /// node seen down (`switch link leaf2[3] - spine1[2]`).
    pub links_down: Vec<String>,
    /// The last [`RECENT_FABRIC_EVENTS`] fabric events (links, processes, nodes).
    pub events: Vec<FabricEvent>,
    /// Each app's NIC (at most [`MAX_LISTED`]).
    pub apps: Vec<AppNic>,
}
