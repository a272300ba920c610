//! The host side of a PMIx server: what the launcher answers when PMIx calls up.
//!
//! [`Host`] has one method per upcall of `pmix_server_module_t` that this crate wires up.
//! Every method has a default: the defaults behave like a single-node host that supports
//! nothing optional (fence hands the locally collected blob back, direct modex finds
//! nothing, credentials and queries are not supported). A launcher overrides what it offers.

use crate::error::Status;
use crate::query::Query;
use crate::server::iof::IofChannels;
use crate::server::reply::{
    CredentialReply, InfoReply, LookupReply, ModexReply, OpReply, SpawnReply, ToolReply,
    ValidationReply,
};
pub use crate::value::App;
use crate::value::Info;
use crate::value::Proc;

/// What a `group` upcall asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupOp {
    /// `PMIx_Group_construct`.
    Construct,
    /// `PMIx_Group_destruct`.
    Destruct,
}

/// The launcher's answers to PMIx upcalls. Methods run on PMIx's progress thread: answer
/// quickly, or keep the reply and answer from another thread. A dropped reply answers with
/// an error, so a client never waits forever.
pub trait Host: Send + Sync + 'static {
    /// A client connected (`client_connected`); `Err` refuses it (its `PMIx_Init` fails
    /// with that status).
    fn client_connected(&self, _proc: &Proc) -> Result<(), Status> {
        Ok(())
    }

    /// A client called `PMIx_Finalize` (`client_finalized`).
    fn client_finalized(&self, _proc: &Proc) {}

    /// A client called `PMIx_Abort` (`abort`). `procs` empty means its whole job.
    fn abort(&self, _proc: &Proc, _status: i32, _msg: &str, _procs: Vec<Proc>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// All local participants of a fence arrived (`fence_nb`); `data` is what they
    /// contributed. A single-node host hands it straight back (the default).
    fn fence(&self, _procs: Vec<Proc>, _info: Vec<Info>, data: Vec<u8>, reply: ModexReply) {
        reply.send(Ok(data));
    }

    /// A client asks for another process's data that is not local (`direct_modex`).
    fn direct_modex(&self, _proc: &Proc, _info: Vec<Info>, reply: ModexReply) {
        reply.send(Err(Status::NOT_FOUND));
    }

    /// `PMIx_Publish` from a client.
    fn publish(&self, _proc: &Proc, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// `PMIx_Lookup` from a client.
    fn lookup(&self, _proc: &Proc, _keys: Vec<String>, _info: Vec<Info>, reply: LookupReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// `PMIx_Unpublish` from a client.
    fn unpublish(&self, _proc: &Proc, _keys: Vec<String>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client raised an event that must leave its server (`notify_event`). Local
    /// delivery already happened inside PMIx; a single-node host has nothing to relay.
    /// (No reply object: in PMIx 4.2 answering from inside this upcall deadlocks, so the
    /// trampoline always reports "done".)
    fn notify_event(&self, _code: Status, _source: Option<&Proc>, _info: &[Info]) {}

    /// `PMIx_Query_info` from a client or tool.
    fn query(&self, _requestor: Option<&Proc>, _queries: Vec<Query>, reply: InfoReply) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A tool connected (`tool_connected`); assign it a name.
    fn tool_connected(&self, _info: Vec<Info>, reply: ToolReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client asks for a credential (`get_credential`).
    fn get_credential(&self, _proc: &Proc, _info: Vec<Info>, reply: CredentialReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client asks whether a credential is genuine (`validate_credential`).
    fn validate_credential(
        &self,
        _proc: &Proc,
        _cred: &[u8],
        _info: Vec<Info>,
        reply: ValidationReply,
    ) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client or tool asks about the fabric (`PMIx_Fabric_register`, `fabric` upcall);
    /// `update` is true for `PMIx_Fabric_update`. Answer with `PMIX_FABRIC_*` infos.
    fn fabric(
        &self,
        _requestor: Option<&Proc>,
        _update: bool,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A client or tool asks to control processes (`PMIx_Job_control_nb`): `targets`
    /// (empty: the requestor's own job; rank `PMIX_RANK_WILDCARD`: a whole namespace) and
    /// what to do (`PMIX_JOB_CTRL_KILL`, `_TERMINATE`, `_SIGNAL`, `_PREEMPTIBLE`,
    /// `_CHECKPOINT`). The default supports none.
    fn job_control(
        &self,
        _requestor: &Proc,
        _targets: Vec<Proc>,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// The local members of a group all asked to construct or destruct it
    /// (`PMIx_Group_construct`/`destruct`; libpmix collects them first, as for a fence).
    /// Answer a construct with what the members learn (`PMIX_GROUP_CONTEXT_ID` when
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID` asks). The default supports none.
    fn group(
        &self,
        _op: GroupOp,
        _name: &str,
        _members: Vec<Proc>,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A client or tool asks for a new job (`PMIx_Spawn`): `job_info` are job-level
    /// directives (`PMIX_NOTIFY_COMPLETION`, `PMIX_DEBUG_STOP_IN_INIT`, ...), `apps` what to
    /// run. Answer with the new job's namespace once its processes started, or a status
    /// (`PMIX_ERR_JOB_FAILED_TO_LAUNCH` when they could not). The default supports none.
    fn spawn(&self, _requestor: &Proc, _job_info: Vec<Info>, _apps: Vec<App>, reply: SpawnReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// The local processes among `procs` all called `PMIx_Connect` with this set (libpmix
    /// collects them first, as for a fence): the host connects them (on one node there is
    /// nothing to move: every namespace's data already lives in this server). The default
    /// supports none.
    fn connect(&self, _procs: Vec<Proc>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// As [`Host::connect`], for `PMIx_Disconnect`.
    fn disconnect(&self, _procs: Vec<Proc>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A tool asks for the output of `procs` on `channels` (`PMIx_IOF_pull`; with
    /// `PMIX_IOF_STOP` among the directives, to stop). The host then hands that output to
    /// the server's [`OutputSink`](crate::server::OutputSink), from which libpmix passes
    /// it to every tool that asked. Answered at once, not through a reply: OpenPMIx 4.2
    /// answers the tool with a malformed message (`UNPACK-PAST-END`) when the host answers
    /// through the callback. The default supports none.
    fn iof_pull(
        &self,
        _procs: Vec<Proc>,
        _directives: Vec<Info>,
        _channels: IofChannels,
    ) -> Result<(), Status> {
        Err(Status::NOT_SUPPORTED)
    }

    /// A client or tool logged something (`PMIx_Log`): `data` holds the channels
    /// (`PMIX_LOG_STDERR` and the like, each with its message), `directives` how
    /// (`PMIX_LOG_ONCE`, `PMIX_LOG_GENERATE_TIMESTAMP`, `PMIX_LOG_SOURCE`). Answer with
    /// success, `PMIX_ERR_PARTIAL_SUCCESS` when some channels were not honoured, or
    /// `PMIX_ERR_NOT_SUPPORTED` when none was. The default honours none.
    fn log(&self, _proc: &Proc, _data: Vec<Info>, _directives: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }
}
