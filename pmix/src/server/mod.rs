//! A PMIx server: the host side that launchers (`maestro run`) use to serve their ranks.
//!
//! The order of calls a single-node launcher makes (measured on OpenPMIx 4.2.2):
//! [`Server::init`] → [`Server::collect_inventory`]/[`Server::deliver_inventory`] →
//! [`Server::setup_application`] → [`Server::register_nspace`] (with every job and per-rank
//! key clients read: build them with [`JobLayout`]) → [`Server::setup_local_support`] → per
//! rank [`Server::setup_fork`] + [`Server::register_client`] + spawn →
//! [`Server::deregister_nspace`] → drop (finalise).
//!
//! Upcalls go to the [`Host`] given to `init`. Gotchas handled here: fences among local
//! clients only reach the host with `PMIX_MCA_pmix_server_fence_localonly_opt=0` (set by
//! `init`); answering `notify_event` from inside the upcall deadlocks (the trampoline never
//! does); `pmix_nspace_t` is `char[256]` (names are copied into full buffers).

mod host;
mod iof;
mod query_fix;
mod reply;
mod upcalls;

use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pmix_sys as sys;

pub use host::{App, GroupOp, Host};
pub use iof::{IofChannel, IofChannels, OutputSink};
pub use query_fix::query_info_nb;
pub use reply::{
    CredentialReply, InfoReply, LookupReply, ModexReply, OpReply, SpawnReply, ToolReply,
    ValidationReply,
};

use crate::error::{Error, Result, Status, check};
use crate::event::{EventHandler, Range};
use crate::keys;
use crate::runtime;
use crate::sync::{Completion, call_op, infos, op_cb};
use crate::value::Info;
use crate::value::{Proc, Rank, Value};
use crate::value::{cstr_lossy, cstring};

/// How long server-side registration calls may take before they count as hung.
const SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of [`Server::init`].
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The server's private temporary directory (rendezvous files, shared-memory stores).
    /// Use a fresh directory per server: stale files from a crashed server confuse tools.
    pub tmpdir: PathBuf,
    /// The system temporary directory (for system-server rendezvous files).
    pub system_tmpdir: PathBuf,
    /// The server's own namespace name.
    pub nspace: String,
    /// The server's own rank.
    pub rank: Rank,
    /// Let PMIx tools (`maestro query`, debuggers) connect.
    pub tool_support: bool,
    /// Be this node's system server: tools find it through a rendezvous file
    /// (`pmix.sys.<host>`) in `system_tmpdir` without knowing its pid. One per node.
    pub system_support: bool,
}

/// The OpenPMIx parameter that lets fences among local processes complete inside the
/// library; [`Server::init`] needs it off, so the host sees every collective.
const FENCE_LOCALONLY: &str = "PMIX_MCA_pmix_server_fence_localonly_opt";

/// Puts what [`Server::init`] needs into the process environment (OpenPMIx reads its
/// parameters from there). Call it first thing in `main`: changing the environment is only
/// sound while no other thread can read it, so this refuses once threads exist.
///
/// # Errors
/// [`Error::Environment`] if the process already has more than one thread (then export
/// `PMIX_MCA_pmix_server_fence_localonly_opt=0` before starting it instead).
pub fn prepare_environment() -> Result<()> {
    if std::env::var_os(FENCE_LOCALONLY).as_deref() == Some("0".as_ref()) {
        return Ok(());
    }
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse::<u32>().ok())
        });
    if threads != Some(1) {
        return Err(Error::Environment(format!(
            "cannot set {FENCE_LOCALONLY}=0: the process has {} threads; export it before \
             the program starts",
            threads.map_or("an unknown number of".into(), |n| n.to_string())
        )));
    }
    // SAFETY: this is the only thread of the process (checked above; only it could start
    // another), so nothing reads the environment concurrently.
    unsafe { std::env::set_var(FENCE_LOCALONLY, "0") };
    Ok(())
}

/// A running PMIx server. Finalises on drop. One per process.
pub struct Server {
    _private: (),
}

impl Server {
    /// Starts the PMIx server library with `host` answering its upcalls.
    ///
    /// # Errors
    /// [`Error::AlreadyInitialized`] if PMIx is in use in this process; a PMIx error if the
    /// library cannot start (unwritable tmpdir, ...).
    #[doc(alias = "PMIx_server_init")]
    pub fn init(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Server> {
        runtime::claim("server")?;
        let result = Server::start(config, host);
        if result.is_err() {
            *upcalls::HOST
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            runtime::release_failed();
        }
        result
    }

    fn start(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Server> {
        if std::env::var_os(FENCE_LOCALONLY).as_deref() != Some("0".as_ref()) {
            return Err(Error::Environment(format!(
                "{FENCE_LOCALONLY}=0 must be in the environment before PMIx_server_init (so \
                 every fence reaches the host): call pmix::server::prepare_environment() first \
                 thing in main, or export it"
            )));
        }
        *upcalls::HOST
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(host);
        let mut dirs = vec![
            Info::new(
                keys::SERVER_TMPDIR,
                Value::String(path_str(&config.tmpdir)?),
            ),
            Info::new(
                keys::SYSTEM_TMPDIR,
                Value::String(path_str(&config.system_tmpdir)?),
            ),
            Info::new(keys::SERVER_NSPACE, Value::String(config.nspace.clone())),
            Info::new(keys::SERVER_RANK, Value::Rank(config.rank)),
            // The host writes its processes' output itself; what it hands to the output
            // sink only goes on to tools (OpenPMIx 4.2 would also write it to a stdout it
            // never set up, and crash).
            Info::new(keys::IOF_LOCAL_OUTPUT, Value::Bool(false)),
        ];
        if config.tool_support {
            dirs.push(Info::new(keys::SERVER_TOOL_SUPPORT, Value::Bool(true)));
        }
        if config.system_support {
            dirs.push(Info::new(keys::SERVER_SYSTEM_SUPPORT, Value::Bool(true)));
        }
        let dirs = infos(&dirs)?;
        // The module must outlive the server: PMIx keeps the pointer.
        let module = Box::leak(Box::new(upcalls::module()));
        // SAFETY: module is 'static; dirs valid for the call.
        let rc = unsafe { sys::PMIx_server_init(module, dirs.as_ptr(), dirs.len()) };
        check("PMIx_server_init", rc)?;
        let server = Server { _private: () };
        iof::set_open(true);
        for (function, attrs) in upcalls::ATTRIBUTES {
            server.register_attributes(function, attrs)?;
        }
        Ok(server)
    }

    /// A handle through which output threads deliver the output of processes to the tools
    /// that pulled it (see [`Host::iof_pull`]).
    pub fn output_sink(&self) -> OutputSink {
        OutputSink::new()
    }

    /// Tells PMIx which attributes the host supports for `function` (a
    /// `pmix_server_module_t` field name), for tools that ask (`PMIX_QUERY_ATTRIBUTE_SUPPORT`,
    /// `pattrs --host`). `attrs` are PMIx's macro names (`PMIX_TIMEOUT`), or `NONE`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name with a NUL byte; a PMIx error if the function
    /// is registered twice.
    #[doc(alias = "PMIx_Register_attributes")]
    pub fn register_attributes(&self, function: &str, attrs: &[&str]) -> Result<()> {
        let function = cstring(function, "function name")?;
        let attrs = attrs
            .iter()
            .map(|a| cstring(a, "attribute name"))
            .collect::<Result<Vec<_>>>()?;
        let mut argv: Vec<*mut c_char> = attrs.iter().map(|a| a.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        // SAFETY: NUL-terminated strings and a NULL-terminated array, valid for the call;
        // PMIx copies them.
        let rc = unsafe {
            sys::PMIx_Register_attributes(function.as_ptr().cast_mut(), argv.as_mut_ptr())
        };
        check("PMIx_Register_attributes", rc)
    }

    /// Registers a job (namespace) with `nlocal` processes on this node and its job-level
    /// and per-rank information.
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`] if PMIx never confirms.
    #[doc(alias = "PMIx_server_register_nspace")]
    pub fn register_nspace(&self, nspace: &str, nlocal: u32, info: &[Info]) -> Result<()> {
        let cns = cstring(nspace, "namespace")?;
        let dirs = infos(info)?;
        let (dp, dn) = (dirs.as_ptr(), dirs.len());
        let n = i32::try_from(nlocal)
            .map_err(|_| Error::InvalidArgument(format!("{nlocal} local processes")))?;
        call_op(
            "PMIx_server_register_nspace",
            SERVER_CALL_TIMEOUT,
            Some(dirs),
            // SAFETY: arguments valid for the call; infos kept until the callback.
            |cbdata| unsafe {
                sys::PMIx_server_register_nspace(cns.as_ptr(), n, dp, dn, Some(op_cb), cbdata)
            },
        )
    }

    /// Removes a job and everything PMIx stored for it.
    #[doc(alias = "PMIx_server_deregister_nspace")]
    pub fn deregister_nspace(&self, nspace: &str) -> Result<()> {
        let cns = cstring(nspace, "namespace")?;
        wait_void("PMIx_server_deregister_nspace", |cbdata| {
            // SAFETY: valid namespace; callback answers.
            unsafe { sys::PMIx_server_deregister_nspace(cns.as_ptr(), Some(op_cb), cbdata) }
        })
    }

    /// Lets pnet and other plugins prepare a job; returns what they add to the job info.
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_server_setup_application")]
    pub fn setup_application(&self, nspace: &str, info: &[Info]) -> Result<Vec<Info>> {
        let cns = cstring(nspace, "namespace")?;
        let dirs = infos(info)?;
        let done = Completion::<(i32, Vec<Info>)>::new();
        let cbdata = done.lend();
        // SAFETY: arguments valid; directives kept alive until the callback.
        let rc = unsafe {
            sys::PMIx_server_setup_application(
                cns.as_ptr(),
                dirs.as_ptr(),
                dirs.len(),
                Some(setup_app_cb),
                cbdata,
            )
        };
        done.keep(dirs);
        wait_infos("PMIx_server_setup_application", rc, cbdata, &done)
    }

    /// Prepares local support for a job (after `register_nspace`).
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_server_setup_local_support")]
    pub fn setup_local_support(&self, nspace: &str, info: &[Info]) -> Result<()> {
        let cns = cstring(nspace, "namespace")?;
        let dirs = infos(info)?;
        let (dp, dn) = (dirs.as_ptr(), dirs.len());
        call_op(
            "PMIx_server_setup_local_support",
            SERVER_CALL_TIMEOUT,
            Some(dirs),
            // SAFETY: arguments valid; infos kept alive.
            |cbdata| unsafe {
                sys::PMIx_server_setup_local_support(cns.as_ptr(), dp, dn, Some(op_cb), cbdata)
            },
        )
    }

    /// Registers a local client that will connect with the given uid/gid.
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_server_register_client")]
    pub fn register_client(&self, proc: &Proc, uid: u32, gid: u32) -> Result<()> {
        let raw = proc.to_raw()?;
        call_op(
            "PMIx_server_register_client",
            SERVER_CALL_TIMEOUT,
            None,
            // SAFETY: proc valid for the call.
            |cbdata| unsafe {
                sys::PMIx_server_register_client(
                    &raw,
                    uid,
                    gid,
                    std::ptr::null_mut(),
                    Some(op_cb),
                    cbdata,
                )
            },
        )
    }

    /// Forgets a client (after it exited).
    #[doc(alias = "PMIx_server_deregister_client")]
    pub fn deregister_client(&self, proc: &Proc) -> Result<()> {
        let raw = proc.to_raw()?;
        wait_void("PMIx_server_deregister_client", |cbdata| {
            // SAFETY: proc valid for the call.
            unsafe { sys::PMIx_server_deregister_client(&raw, Some(op_cb), cbdata) }
        })
    }

    /// The environment variables a client needs to find this server
    /// (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`, ...), to add to its environment.
    ///
    /// # Errors
    /// PMIx errors.
    #[doc(alias = "PMIx_server_setup_fork")]
    pub fn setup_fork(&self, proc: &Proc) -> Result<Vec<(String, String)>> {
        let raw = proc.to_raw()?;
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: PMIx appends malloc'ed "K=V" strings to the (initially empty) argv.
        let rc = unsafe { sys::PMIx_server_setup_fork(&raw, &mut env) };
        let mut out = Vec::new();
        if !env.is_null() {
            let mut i = 0;
            // SAFETY: NULL-terminated argv created by PMIx; freed below.
            unsafe {
                while !(*env.add(i)).is_null() {
                    let kv = cstr_lossy(*env.add(i));
                    if let Some((k, v)) = kv.split_once('=') {
                        out.push((k.to_string(), v.to_string()));
                    }
                    i += 1;
                }
                sys::mpmix_argv_free(env);
            }
        }
        check("PMIx_server_setup_fork", rc)?;
        Ok(out)
    }

    /// Asks the local plugins for the node's inventory (OpenPMIx 4.2 returns nothing on
    /// nodes without an OPA fabric).
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_server_collect_inventory")]
    pub fn collect_inventory(&self, directives: &[Info]) -> Result<Vec<Info>> {
        let dirs = infos(directives)?;
        let done = Completion::<(i32, Vec<Info>)>::new();
        let cbdata = done.lend();
        // SAFETY: directives kept alive until the callback.
        let rc = unsafe {
            sys::PMIx_server_collect_inventory(
                dirs.as_ptr(),
                dirs.len(),
                Some(crate::sync::info_cb),
                cbdata,
            )
        };
        done.keep(dirs);
        wait_infos("PMIx_server_collect_inventory", rc, cbdata, &done)
    }

    /// Hands an inventory (from this or another node) to the local plugins.
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_server_deliver_inventory")]
    pub fn deliver_inventory(&self, inventory: &[Info], directives: &[Info]) -> Result<()> {
        let inv = infos(inventory)?;
        let dirs = infos(directives)?;
        let (ip, il, dp, dl) = (inv.as_ptr(), inv.len(), dirs.as_ptr(), dirs.len());
        let keep = inv;
        call_op(
            "PMIx_server_deliver_inventory",
            SERVER_CALL_TIMEOUT,
            Some(dirs),
            // SAFETY: arrays valid for the call (the inventory is copied before return).
            |cbdata| unsafe {
                let rc = sys::PMIx_server_deliver_inventory(ip, il, dp, dl, Some(op_cb), cbdata);
                drop(keep);
                rc
            },
        )
    }

    /// Raises an event from the server to its clients. Clients receive it if they
    /// registered for `status` explicitly.
    ///
    /// # Errors
    /// PMIx errors; [`Error::Timeout`].
    #[doc(alias = "PMIx_Notify_event")]
    pub fn notify_event(
        &self,
        status: Status,
        source: &Proc,
        range: Range,
        info: &[Info],
    ) -> Result<()> {
        crate::event::notify(status, Some(source), range, info)
    }

    /// Registers a server-side event handler; see [`EventHandler`].
    ///
    /// # Errors
    /// PMIx errors from the registration.
    #[doc(alias = "PMIx_Register_event_handler")]
    pub fn register_events(&self, codes: &[Status]) -> Result<EventHandler<'_>> {
        EventHandler::register(codes)
    }

    /// The locality string (`SK0:L30:...:HT0-1`) of this process's current CPU binding,
    /// which children inherit when not bound otherwise.
    ///
    /// # Errors
    /// PMIx errors (no topology available, ...).
    #[doc(alias = "PMIx_Get_cpuset")]
    pub fn own_locality_string(&self) -> Result<String> {
        let mut cs = sys::pmix_cpuset_t::default();
        // SAFETY: cs is filled by PMIx and destructed below.
        unsafe {
            let rc = sys::PMIx_Get_cpuset(&mut cs, sys::PMIX_CPUBIND_PROCESS as _);
            check("PMIx_Get_cpuset", rc)?;
            let mut loc: *mut c_char = std::ptr::null_mut();
            let rc = sys::PMIx_server_generate_locality_string(&cs, &mut loc);
            sys::PMIx_Cpuset_destruct(&mut cs);
            check("PMIx_server_generate_locality_string", rc)?;
            let s = cstr_lossy(loc);
            libc::free(loc.cast());
            Ok(s)
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Output deliveries end first (waiting for one in flight).
        iof::set_open(false);
        // Answers still queued go first: no callback may reach a finalized library.
        if !reply::replier::flush(Duration::from_secs(2)) {
            tracing::warn!("PMIx answers still queued at finalize");
        }
        // SAFETY: the server was initialised by this object.
        let rc = unsafe { sys::PMIx_server_finalize() };
        if let Err(e) = check("PMIx_server_finalize", rc) {
            tracing::warn!("{e}");
        }
        *upcalls::HOST
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// Everything a single-node job registers so that any PMIx client finds what it reads
/// (OpenPMIx synthesises nothing: a key the host does not register is NOT_FOUND).
#[derive(Clone, Debug)]
pub struct JobLayout {
    /// The job's namespace.
    pub nspace: String,
    /// The job id string (`PMIX_JOBID`).
    pub jobid: String,
    /// This node's name.
    pub hostname: String,
    /// Number of ranks (all on this node).
    pub nprocs: u32,
    /// Locality string per rank (`PMIX_LOCALITY_STRING`); empty entries are left out.
    pub locality: Vec<String>,
    /// Application number per rank (`PMIX_APPNUM`, with `PMIX_APP_RANK` counted within
    /// the application); missing entries are application 0.
    pub appnums: Vec<u32>,
    /// Extra job-level infos (`setup_application` results, fabric keys, ...).
    pub extra_job_info: Vec<Info>,
    /// Extra per-rank infos, indexed by rank.
    pub extra_proc_info: Vec<Vec<Info>>,
}

impl JobLayout {
    /// The infos for [`Server::register_nspace`]: `UNIV_SIZE`, `JOB_SIZE`, `MAX_PROCS`,
    /// `LOCAL_SIZE`, `LOCAL_PEERS`, `NODE_MAP`, `PROC_MAP`, `JOBID`, `APPNUM`, `NUM_NODES`,
    /// `NODE_LIST`, and per rank `RANK`, `LOCAL_RANK`, `NODE_RANK`, `HOSTNAME`, `APPNUM`,
    /// `APP_RANK`, `LOCALITY_STRING`.
    ///
    /// # Errors
    /// PMIx errors from the regex generators; [`Error::InvalidArgument`] for names PMIx
    /// cannot carry.
    pub fn to_infos(&self) -> Result<Vec<Info>> {
        let ranks: Vec<String> = (0..self.nprocs).map(|r| r.to_string()).collect();
        let ranks = ranks.join(",");
        let n = self.nprocs;
        let mut out = vec![
            Info::new(keys::UNIV_SIZE, Value::Uint32(n)),
            Info::new(keys::JOB_SIZE, Value::Uint32(n)),
            Info::new(keys::MAX_PROCS, Value::Uint32(n)),
            Info::new(keys::LOCAL_SIZE, Value::Uint32(n)),
            Info::new(keys::NUM_NODES, Value::Uint32(1)),
            Info::new(keys::LOCAL_PEERS, Value::String(ranks.clone())),
            Info::new(keys::NODE_LIST, Value::String(self.hostname.clone())),
            Info::new(
                keys::NODE_MAP,
                Value::String(generate(
                    "PMIx_generate_regex",
                    &self.hostname,
                    sys::PMIx_generate_regex,
                )?),
            ),
            Info::new(
                keys::PROC_MAP,
                Value::String(generate(
                    "PMIx_generate_ppn",
                    &ranks,
                    sys::PMIx_generate_ppn,
                )?),
            ),
            Info::new(keys::JOBID, Value::String(self.jobid.clone())),
            Info::new(keys::APPNUM, Value::Uint32(0)),
        ];
        out.extend(self.extra_job_info.iter().cloned());
        let appnum = |r: u32| self.appnums.get(r as usize).copied().unwrap_or(0);
        let mut app_rank = 0;
        for r in 0..n {
            let local = u16::try_from(r)
                .map_err(|_| Error::InvalidArgument(format!("{n} ranks on one node")))?;
            if r > 0 && appnum(r) != appnum(r - 1) {
                app_rank = 0;
            }
            let mut per = vec![
                Info::new(keys::RANK, Value::Rank(r)),
                Info::new(keys::LOCAL_RANK, Value::Uint16(local)),
                Info::new(keys::NODE_RANK, Value::Uint16(local)),
                Info::new(keys::HOSTNAME, Value::String(self.hostname.clone())),
                Info::new(keys::APPNUM, Value::Uint32(appnum(r))),
                Info::new(keys::APP_RANK, Value::Uint32(app_rank)),
                Info::new(keys::NODEID, Value::Uint32(0)),
            ];
            if let Some(loc) = self.locality.get(r as usize).filter(|l| !l.is_empty()) {
                per.push(Info::new(keys::LOCALITY_STRING, Value::String(loc.clone())));
            }
            if let Some(extra) = self.extra_proc_info.get(r as usize) {
                per.extend(extra.iter().cloned());
            }
            out.push(Info::new(keys::PROC_DATA, Value::Infos(per)));
            app_rank += 1;
        }
        Ok(out)
    }
}

/// Calls one of PMIx's regex generators and frees its result.
fn generate(
    op: &'static str,
    input: &str,
    f: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> i32,
) -> Result<String> {
    let c = cstring(input, "regex input")?;
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: valid input; PMIx mallocs the output.
    let rc = unsafe { f(c.as_ptr(), &mut out) };
    check(op, rc)?;
    // SAFETY: a valid C string (or NULL), freed after copying. The regex may contain
    // embedded NULs only in PMIx's binary formats, which the defaults do not use.
    let s = unsafe { cstr_lossy(out) };
    // SAFETY: malloc'ed by PMIx.
    unsafe { libc::free(out.cast()) };
    Ok(s)
}

fn path_str(p: &std::path::Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::InvalidArgument(format!("path {} is not UTF-8", p.display())))
}

/// Calls a void PMIx function that answers through `op_cb` and waits for it.
fn wait_void(op: &'static str, start: impl FnOnce(*mut std::ffi::c_void)) -> Result<()> {
    let done = Completion::<i32>::new();
    start(done.lend());
    match done.wait(SERVER_CALL_TIMEOUT) {
        Some(rc) => check(op, rc),
        None => Err(Error::Timeout { op }),
    }
}

/// Waits for an info callback after a call that returned `rc`.
fn wait_infos(
    op: &'static str,
    rc: i32,
    cbdata: *mut std::ffi::c_void,
    done: &Completion<(i32, Vec<Info>)>,
) -> Result<Vec<Info>> {
    if rc != sys::PMIX_SUCCESS as i32 {
        // SAFETY: the call failed synchronously; no callback will come.
        unsafe { Completion::<(i32, Vec<Info>)>::reclaim(cbdata) };
        return if rc == sys::PMIX_OPERATION_SUCCEEDED {
            Ok(Vec::new())
        } else {
            Err(crate::error::from_status(op, rc, None))
        };
    }
    match done.wait(SERVER_CALL_TIMEOUT) {
        Some((rc, v)) => check(op, rc).map(|()| v),
        None => Err(Error::Timeout { op }),
    }
}

unsafe extern "C" fn setup_app_cb(
    status: i32,
    info: *mut sys::pmix_info_t,
    ninfo: usize,
    provided_cbdata: *mut std::ffi::c_void,
    cbfunc: sys::pmix_op_cbfunc_t,
    cbdata: *mut std::ffi::c_void,
) {
    crate::ffi::guard("PMIx callback setup_app_cb", (), || {
        // SAFETY: PMIx lends the infos until we call cbfunc.
        let v = unsafe { Info::vec_from_raw(info, ninfo) };
        if let Some(cb) = cbfunc {
            // SAFETY: releasing PMIx's data once.
            unsafe { cb(sys::PMIX_SUCCESS as i32, cbdata) };
        }
        // SAFETY: provided_cbdata is ours.
        unsafe { Completion::<(i32, Vec<Info>)>::complete(provided_cbdata, (status, v)) };
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With another thread alive the environment cannot be changed soundly: refused, with
    /// what to do instead. (`maestro run` calls it first thing in `main`; tests/launcher.rs
    /// shows the server then starts.)
    #[test]
    fn the_environment_is_not_changed_once_threads_exist() {
        if std::env::var_os(FENCE_LOCALONLY).is_some() {
            return; // exported by whoever runs the tests: nothing to change
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        let err = prepare_environment().expect_err("changed the environment with threads");
        assert!(
            matches!(&err, Error::Environment(m) if m.contains("export it")),
            "{err}"
        );
        assert!(std::env::var_os(FENCE_LOCALONLY).is_none());
        drop(tx);
        let _ = other.join();
    }
}
