//! The PMIx keys this project defines (not PMIx standard): every key Maestro puts,
//! publishes, answers queries with or raises events with, in one place. Documented for users
//! and tools in `docs/protocol.md`. A crate of its own, apart from the PMIx bindings, so the
//! bindings carry no Maestro policy and every crate that speaks Maestro over PMIx
//! (inventory, pool, mstro, the launcher) shares one spelling.

/// Job-level key (under `maestro run`) and query key: the node's fabric inventory as
/// JSON (schema `maestro.inventory/1`).
pub const FABRIC_INVENTORY: &str = "maestro.fabric.inventory";
/// Query key: the NIC of each rank, as JSON
/// `{"<rank>": {"nic": ..., "reasons": [...]}}`.
pub const FABRIC_ASSIGNMENT: &str = "maestro.fabric.assignment";
/// Per-rank key (under `maestro run`): the name of the NIC the rank should use.
pub const FABRIC_NIC: &str = "maestro.fabric.nic";
/// In a `PMIX_FABRIC_DEVICES` entry: the device's local CPUs (list syntax).
pub const FABRIC_CPUS: &str = "maestro.fabric.cpus";
/// In a `PMIX_FABRIC_DEVICES` entry: the device's NUMA nodes (list syntax).
pub const FABRIC_NUMA: &str = "maestro.fabric.numa";
/// In a `PMIX_FABRIC_DEVICES` entry: RDMA-capable (bool).
pub const FABRIC_RDMA: &str = "maestro.fabric.rdma";
/// In a `PMIX_FABRIC_DEVICES` entry: libfabric providers on the device (string array).
pub const FABRIC_PROVIDERS: &str = "maestro.fabric.providers";
/// In a `PMIX_FABRIC_DEVICES` entry: other OS device names (string array).
pub const FABRIC_ALIASES: &str = "maestro.fabric.aliases";
/// In a `PMIX_FABRIC_DEVICES` entry of a network interface: bytes received since it came
/// up, when the device was registered or updated (uint64; the kernel's counters).
pub const FABRIC_RX_BYTES: &str = "maestro.fabric.rx-bytes";
/// As [`FABRIC_RX_BYTES`]: bytes sent.
pub const FABRIC_TX_BYTES: &str = "maestro.fabric.tx-bytes";
/// As [`FABRIC_RX_BYTES`]: packets received.
pub const FABRIC_RX_PACKETS: &str = "maestro.fabric.rx-packets";
/// As [`FABRIC_RX_BYTES`]: packets sent.
pub const FABRIC_TX_PACKETS: &str = "maestro.fabric.tx-packets";
/// As [`FABRIC_RX_BYTES`]: receive and send errors together.
pub const FABRIC_ERRORS: &str = "maestro.fabric.errors";
/// In a `PMIx_Fabric_register` answer with the fabric beyond the node: the hosts the
/// rows and columns of `PMIX_FABRIC_COST_MATRIX` are, in order (string array).
pub const FABRIC_HOSTS: &str = "maestro.fabric.hosts";
/// Query key (and in a `PMIx_Fabric_register` answer): the fabric beyond the node, its
/// switches, hosts and links, as the JSON of `maestro inventory --fabric ... --json`
/// (string).
pub const FABRIC_TOPOLOGY: &str = "maestro.fabric.topology";
/// In a `PMIX_FABRIC_UPDATED` event: the switch link of the fabric beyond the node that
/// changed, by its ends and ports (`leaf2[3] - spine1[2]`; string), with [`LINK_UP`].
pub const SWITCH_LINK: &str = "maestro.fabric.switch-link";
/// In a `PMIX_FABRIC_UPDATED` event: the interface whose link changed (string).
pub const LINK_NAME: &str = "maestro.fabric.link";
/// In a `PMIX_FABRIC_UPDATED` event: whether the link is up now (bool).
pub const LINK_UP: &str = "maestro.fabric.link-up";
/// In a `PMIX_FABRIC_UPDATED` event: the interface's addresses as `ip/prefix`,
/// comma-separated (string).
pub const LINK_ADDRESSES: &str = "maestro.fabric.link-addresses";
/// Job-level key put by the pool manager's rank: its PM info (string,
/// `mstro-pm-v1:...`). Published for other jobs as `maestro.pool.pm-info.<workflow>`.
pub const PM_INFO: &str = "maestro.pool.pm-info";
/// Put by each rank of a job whose ranks are the shards of one pool (`maestro pm
/// --shards K` as `K` ranks): that rank's manager's own PM info, from which rank 0 makes
/// the pool's (`pool::bootstrap::start_shards_of_job`).
pub const PM_SHARD: &str = "maestro.pool.pm-shard";
/// Query key answered by `maestro run`'s host: the pool's status (string, the JSON of
/// `maestro pool status --json`). Qualifier [`POOL_WORKFLOW`] picks the workflow.
pub const POOL_STATUS: &str = "maestro.pool.status";
/// Query key: a page of the pool's CDOs (string, the JSON of `maestro pool ls
/// --json`); qualifiers [`POOL_WORKFLOW`], [`POOL_SELECTOR`], [`POOL_AFTER`].
pub const POOL_CDOS: &str = "maestro.pool.cdos";
/// Query key: transfers in flight and recent (string, JSON).
pub const POOL_TRANSFERS: &str = "maestro.pool.transfers";
/// Query key: the pool's traffic per NIC and provider, links, each app's NIC (string,
/// JSON).
pub const POOL_FABRIC: &str = "maestro.pool.fabric";
/// Query qualifier: which workflow's pool (string; default: the only one published).
pub const POOL_WORKFLOW: &str = "maestro.pool.workflow";
/// Query qualifier of [`POOL_CDOS`]: a selector over full attribute keys (string,
/// `(= .maestro.core.cdo.name "x")`).
pub const POOL_SELECTOR: &str = "maestro.pool.selector";
/// Query qualifier of [`POOL_CDOS`]: list CDOs after this id (uint64, the `next` of
/// the previous page).
pub const POOL_AFTER: &str = "maestro.pool.after";
