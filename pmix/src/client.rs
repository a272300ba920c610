//! The PMIx client: a process started by a PMIx host (`maestro run`, `srun --mpi=pmix`,
//! `mpirun`) talking to that host.
//!
//! Every call that waits takes a timeout and returns [`Error::Timeout`] when it runs out;
//! the pending PMIx request is then left to complete in the background (see `sync`), never
//! freed under PMIx. Capabilities a host lacks come back as [`Error::NotSupported`]: Slurm's
//! stepd, for example, has no publish/lookup, no credentials and no query.

use std::ffi::c_void;
use std::time::Duration;

use pmix_sys as sys;

use crate::error::{Error, Result, Status, check, from_status};
use crate::event::{EventHandler, Range};
use crate::ffi::CArgv;
use crate::keys;
use crate::query::{Query, query_info};
use crate::runtime;
use crate::sync::{Completion, call_op, infos, op_cb};
use crate::value::Info;
use crate::value::{Proc, Rank, Value};
use crate::value::{bytes_from_raw, bytes_to_raw, cstring, fixed_str};

/// Where `put` data is visible (`pmix_scope_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only processes on this node.
    Local,
    /// Only processes on other nodes.
    Remote,
    /// Everyone.
    Global,
}

/// Options of [`Client::get`].
#[derive(Clone, Copy, Debug)]
pub struct GetOptions {
    /// How long to wait for the value (a remote peer may not have committed yet).
    pub timeout: Duration,
    /// `PMIX_IMMEDIATE`: answer from what is already local, do not ask the host.
    pub immediate: bool,
}

impl Default for GetOptions {
    fn default() -> Self {
        GetOptions {
            timeout: Duration::from_secs(30),
            immediate: false,
        }
    }
}

impl GetOptions {
    /// Local data only, with a short timeout: for job-level keys the host registered.
    pub fn immediate() -> GetOptions {
        GetOptions {
            timeout: Duration::from_secs(5),
            immediate: true,
        }
    }
}

/// One datum returned by [`Client::lookup`].
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// Who published it.
    pub publisher: Proc,
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
}

/// A credential issued by the host ([`Client::get_credential`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Credential {
    /// The opaque credential, to hand to a peer that validates it.
    pub bytes: Vec<u8>,
    /// What the host says about it (`PMIX_CRED_TYPE`, ...).
    pub info: Vec<Info>,
}

/// An initialised PMIx client. Finalises on drop. One per process.
pub struct Client {
    me: Proc,
}

impl Client {
    /// Connects to the PMIx host named by the environment the launcher set up.
    ///
    /// # Errors
    /// [`Error::Unreachable`] when the process was not started by a PMIx host (OpenPMIx 4.2
    /// has no singleton mode); [`Error::AlreadyInitialized`] on a second initialisation.
    #[doc(alias = "PMIx_Init")]
    pub fn init() -> Result<Client> {
        Client::init_with(&[])
    }

    /// [`Client::init`] with directives for `PMIx_Init`.
    ///
    /// # Errors
    /// As [`Client::init`], plus [`Error::InvalidArgument`] for a malformed directive.
    #[doc(alias = "PMIx_Init")]
    pub fn init_with(directives: &[Info]) -> Result<Client> {
        runtime::claim("client")?;
        let result = (|| {
            let dirs = infos(directives)?;
            let mut raw = sys::pmix_proc_t::default();
            // SAFETY: raw and dirs are valid for the call.
            let rc = unsafe { sys::PMIx_Init(&mut raw, dirs.as_ptr(), dirs.len()) };
            check("PMIx_Init", rc)?;
            // SAFETY: PMIx_Init filled raw.
            let me = unsafe { Proc::from_raw(&raw) };
            Ok(Client { me })
        })();
        if result.is_err() {
            runtime::release_failed();
        }
        result
    }

    /// This process's name.
    pub fn proc(&self) -> &Proc {
        &self.me
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.me.rank
    }

    /// This process's namespace.
    pub fn nspace(&self) -> &str {
        &self.me.nspace
    }

    /// The job size (`PMIX_JOB_SIZE`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the host did not register it.
    pub fn job_size(&self) -> Result<u32> {
        self.get_job_u64(keys::JOB_SIZE).map(|v| v as u32)
    }

    /// The rank among the job's processes on this node (`PMIX_LOCAL_RANK`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the host did not register it.
    pub fn local_rank(&self) -> Result<u16> {
        self.get_own_u64(keys::LOCAL_RANK).map(|v| v as u16)
    }

    /// The rank among all processes on this node (`PMIX_NODE_RANK`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the host did not register it.
    pub fn node_rank(&self) -> Result<u16> {
        self.get_own_u64(keys::NODE_RANK).map(|v| v as u16)
    }

    /// The host name of this node as the launcher sees it (`PMIX_HOSTNAME`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the host did not register it.
    pub fn hostname(&self) -> Result<String> {
        let v = self.get(&self.me, keys::HOSTNAME, GetOptions::immediate())?;
        expect_string(keys::HOSTNAME, v)
    }

    /// The ranks of this job on this node (`PMIX_LOCAL_PEERS`).
    ///
    /// # Errors
    /// [`Error::NotFound`] if the host did not register it; [`Error::WrongType`] if the
    /// list is not a comma-separated list of ranks.
    pub fn local_peers(&self) -> Result<Vec<Rank>> {
        let v = self.get(
            &Proc::wildcard(&self.me.nspace),
            keys::LOCAL_PEERS,
            GetOptions::immediate(),
        )?;
        let s = expect_string(keys::LOCAL_PEERS, v)?;
        s.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.trim().parse::<Rank>().map_err(|_| Error::WrongType {
                    key: keys::LOCAL_PEERS.into(),
                    expected: "comma-separated ranks",
                    got: s.clone(),
                })
            })
            .collect()
    }

    fn get_job_u64(&self, key: &str) -> Result<u64> {
        let v = self.get(
            &Proc::wildcard(&self.me.nspace),
            key,
            GetOptions::immediate(),
        )?;
        expect_u64(key, v)
    }

    fn get_own_u64(&self, key: &str) -> Result<u64> {
        let v = self.get(&self.me, key, GetOptions::immediate())?;
        expect_u64(key, v)
    }

    /// Reads `key` as put by `proc` (or registered by the host for it; job-level keys live
    /// at [`Proc::wildcard`]).
    ///
    /// # Errors
    /// [`Error::NotFound`] when nobody put the key (with `immediate`, when it is not local
    /// yet); [`Error::Timeout`] when the value did not arrive in time.
    #[doc(alias = "PMIx_Get")]
    pub fn get(&self, proc: &Proc, key: &str, opts: GetOptions) -> Result<Value> {
        let raw_proc = proc.to_raw()?;
        let ckey = cstring(key, "key")?;
        let mut directives = vec![Info::new(
            keys::TIMEOUT,
            Value::Int(timeout_secs(opts.timeout)),
        )];
        if opts.immediate {
            directives.push(Info::new(keys::IMMEDIATE, Value::Bool(true)));
        }
        let dirs = infos(&directives)?;
        let done = Completion::<(i32, Option<Value>)>::new();
        let cbdata = done.lend();
        // SAFETY: arguments are valid for the call; PMIx keeps pointers to the key and the
        // directives until it calls back, so both are kept alive by the completion.
        let rc = unsafe {
            sys::PMIx_Get_nb(
                &raw_proc,
                ckey.as_ptr(),
                dirs.as_ptr(),
                dirs.len(),
                Some(value_cb),
                cbdata,
            )
        };
        done.keep(dirs);
        done.keep(ckey);
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come.
            unsafe { Completion::<(i32, Option<Value>)>::reclaim(cbdata) };
            return Err(from_status("PMIx_Get", rc, Some(key)));
        }
        match done.wait(opts.timeout + Duration::from_secs(1)) {
            Some((0, Some(v))) => Ok(v),
            Some((0, None)) => Err(Error::NotFound {
                op: "PMIx_Get",
                what: key.to_string(),
            }),
            Some((rc, _)) => Err(from_status("PMIx_Get", rc, Some(key))),
            None => Err(Error::Timeout { op: "PMIx_Get" }),
        }
    }

    /// Stores `key = value` for others to `get` once committed and (for remote readers)
    /// exchanged by a fence.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key; PMIx errors otherwise.
    #[doc(alias = "PMIx_Put")]
    pub fn put(&self, scope: Scope, key: &str, value: &Value) -> Result<()> {
        let ckey = cstring(key, "key")?;
        let mut raw = sys::pmix_value_t::default();
        // SAFETY: raw is zeroed; PMIx_Put copies the value; destructed afterwards.
        unsafe {
            value.load(&mut raw)?;
            let raw_scope = match scope {
                Scope::Local => sys::PMIX_LOCAL,
                Scope::Remote => sys::PMIX_REMOTE,
                Scope::Global => sys::PMIX_GLOBAL,
            } as u8;
            let rc = sys::PMIx_Put(raw_scope, ckey.as_ptr(), &mut raw);
            sys::PMIx_Value_destruct(&mut raw);
            check("PMIx_Put", rc)
        }
    }

    /// Pushes the data `put` so far to the local host.
    ///
    /// # Errors
    /// PMIx errors (a lost host connection, ...).
    #[doc(alias = "PMIx_Commit")]
    pub fn commit(&self) -> Result<()> {
        // SAFETY: no arguments.
        check("PMIx_Commit", unsafe { sys::PMIx_Commit() })
    }

    /// Waits until every process in `procs` (empty: the whole job) reached the fence; with
    /// `collect`, committed data is exchanged so later `get`s are local.
    ///
    /// # Errors
    /// [`Error::Timeout`] if some process did not arrive within `timeout`; a PMIx error if
    /// the host failed the fence (a participant died, for example).
    #[doc(alias = "PMIx_Fence")]
    pub fn fence(&self, procs: &[Proc], collect: bool, timeout: Duration) -> Result<()> {
        let raw: Vec<sys::pmix_proc_t> = if procs.is_empty() {
            vec![Proc::wildcard(&self.me.nspace).to_raw()?]
        } else {
            procs.iter().map(Proc::to_raw).collect::<Result<_>>()?
        };
        let dirs = infos(&[
            Info::new(keys::COLLECT_DATA, Value::Bool(collect)),
            Info::new(keys::TIMEOUT, Value::Int(timeout_secs(timeout))),
        ])?;
        let (dp, dn) = (dirs.as_ptr(), dirs.len());
        call_op(
            "PMIx_Fence",
            timeout + Duration::from_secs(1),
            Some(dirs),
            // SAFETY: procs and directives are valid for the call (directives kept alive).
            |cbdata| unsafe {
                sys::PMIx_Fence_nb(raw.as_ptr(), raw.len(), dp, dn, Some(op_cb), cbdata)
            },
        )
    }

    /// Publishes `data` for `lookup` by other jobs within `range`.
    ///
    /// # Errors
    /// [`Error::NotSupported`] under hosts without publish (Slurm).
    #[doc(alias = "PMIx_Publish")]
    pub fn publish(&self, data: &[Info], range: Range, timeout: Duration) -> Result<()> {
        let mut all = data.to_vec();
        all.push(Info::new(keys::RANGE, Value::Range(range.raw())));
        all.push(Info::new(keys::TIMEOUT, Value::Int(timeout_secs(timeout))));
        let dirs = infos(&all)?;
        let (dp, dn) = (dirs.as_ptr(), dirs.len());
        call_op(
            "PMIx_Publish",
            timeout + Duration::from_secs(1),
            Some(dirs),
            // SAFETY: the info array is kept alive until the callback.
            |cbdata| unsafe { sys::PMIx_Publish_nb(dp, dn, Some(op_cb), cbdata) },
        )
    }

    /// Looks up published keys. With `wait`, blocks until all keys are published or the
    /// wait ends; without, answers with what exists now.
    ///
    /// # Errors
    /// [`Error::NotFound`] if a key is not published; [`Error::Timeout`] if `wait` ran out;
    /// [`Error::NotSupported`] under hosts without lookup (Slurm).
    #[doc(alias = "PMIx_Lookup")]
    pub fn lookup(&self, keys_wanted: &[&str], wait: Option<Duration>) -> Result<Vec<Published>> {
        let argv = CArgv::new(keys_wanted)?;
        let timeout = wait.unwrap_or(Duration::from_secs(10));
        let mut directives = vec![Info::new(keys::TIMEOUT, Value::Int(timeout_secs(timeout)))];
        if wait.is_some() {
            directives.push(Info::new(keys::WAIT, Value::Int(0)));
        }
        let dirs = infos(&directives)?;
        let done = Completion::<(i32, Vec<Published>)>::new();
        let cbdata = done.lend();
        // SAFETY: argv is NULL-terminated; argv and dirs are kept alive by the completion.
        let rc = unsafe {
            sys::PMIx_Lookup_nb(
                argv.as_ptr(),
                dirs.as_ptr(),
                dirs.len(),
                Some(lookup_cb),
                cbdata,
            )
        };
        done.keep(argv);
        done.keep(dirs);
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come.
            unsafe { Completion::<(i32, Vec<Published>)>::reclaim(cbdata) };
            return Err(from_status("PMIx_Lookup", rc, Some(&keys_wanted.join(","))));
        }
        match done.wait(timeout + Duration::from_secs(1)) {
            Some((0, found)) => Ok(found),
            Some((rc, _)) => Err(from_status("PMIx_Lookup", rc, Some(&keys_wanted.join(",")))),
            None => Err(Error::Timeout { op: "PMIx_Lookup" }),
        }
    }

    /// Removes keys this process published.
    ///
    /// # Errors
    /// [`Error::NotSupported`] under hosts without publish.
    #[doc(alias = "PMIx_Unpublish")]
    pub fn unpublish(&self, keys_gone: &[&str], timeout: Duration) -> Result<()> {
        let argv = CArgv::new(keys_gone)?;
        call_op(
            "PMIx_Unpublish",
            timeout,
            None,
            // SAFETY: argv outlives the call, which packs the keys before returning.
            |cbdata| unsafe {
                sys::PMIx_Unpublish_nb(argv.as_ptr(), std::ptr::null(), 0, Some(op_cb), cbdata)
            },
        )
    }

    /// Registers for the given event codes; see [`EventHandler`].
    ///
    /// # Errors
    /// PMIx errors from the registration.
    #[doc(alias = "PMIx_Register_event_handler")]
    pub fn register_events(&self, codes: &[Status]) -> Result<EventHandler<'_>> {
        EventHandler::register(codes)
    }

    /// Raises an event with this process as source.
    ///
    /// Never call this under Slurm with a range wider than [`Range::ProcLocal`]: Slurm's
    /// stepd kills the whole step on any client notification.
    ///
    /// # Errors
    /// PMIx errors from the notification.
    #[doc(alias = "PMIx_Notify_event")]
    pub fn notify_event(&self, status: Status, range: Range, info: &[Info]) -> Result<()> {
        crate::event::notify(status, Some(&self.me), range, info)
    }

    /// Asks the host for a credential proving this process's identity.
    ///
    /// # Errors
    /// [`Error::NotSupported`] when the host issues none (Slurm, mpirun).
    #[doc(alias = "PMIx_Get_credential")]
    pub fn get_credential(&self, timeout: Duration) -> Result<Credential> {
        let done = Completion::<(i32, Option<Credential>)>::new();
        let cbdata = done.lend();
        // SAFETY: no directives; cbdata is ours.
        let rc = unsafe {
            sys::PMIx_Get_credential_nb(std::ptr::null(), 0, Some(credential_cb), cbdata)
        };
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come.
            unsafe { Completion::<(i32, Option<Credential>)>::reclaim(cbdata) };
            return Err(from_status("PMIx_Get_credential", rc, None));
        }
        match done.wait(timeout) {
            Some((0, Some(c))) => Ok(c),
            Some((rc, _)) => Err(from_status("PMIx_Get_credential", rc, None)),
            None => Err(Error::Timeout {
                op: "PMIx_Get_credential",
            }),
        }
    }

    /// Starts a new job (`PMIx_Spawn`): each of `apps` with its `maxprocs` copies, under
    /// `job_info` directives; returns the new job's namespace once the host launched it.
    /// A workflow manager starts a product-generation job this way where the host allows
    /// it (`maestro run` does, within its `--max-spawn`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a NUL byte in a command, argument, variable or
    /// directory; [`Error::NotSupported`] where the host spawns nothing; the host's refusal
    /// (`PMIX_ERR_BAD_PARAM` past its limits) or [`Error::Timeout`] after `timeout`.
    #[doc(alias = "PMIx_Spawn")]
    pub fn spawn(
        &self,
        apps: &[crate::value::App],
        job_info: &[Info],
        timeout: Duration,
    ) -> Result<String> {
        let built = SpawnArgs::new(apps, job_info)?;
        let (ji, jn) = (built.job_info.as_ptr(), built.job_info.len());
        let (ap, an) = (built.apps.as_ptr(), built.apps.len());
        let done = Completion::<(i32, String)>::new();
        done.keep(built);
        let cbdata = done.lend();
        // SAFETY: the apps and directives live in the completion until it is dropped,
        // which is after the callback (or after a synchronous failure).
        let rc = unsafe { sys::PMIx_Spawn_nb(ji, jn, ap, an, Some(spawn_cb), cbdata) };
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come.
            unsafe { Completion::<(i32, String)>::reclaim(cbdata) };
            return Err(from_status("PMIx_Spawn", rc, None));
        }
        match done.wait(timeout) {
            Some((0, nspace)) => Ok(nspace),
            Some((rc, _)) => Err(from_status("PMIx_Spawn", rc, None)),
            None => Err(Error::Timeout { op: "PMIx_Spawn" }),
        }
    }

    /// Asks the host whether `cred` is a credential it issued; returns what the host knows
    /// of its owner (`PMIX_USERID`, `PMIX_GRPID`, ...).
    ///
    /// # Errors
    /// A PMIx error (`PMIX_ERR_INVALID_CRED`) for a forged or foreign credential;
    /// [`Error::NotSupported`] when the host validates none.
    #[doc(alias = "PMIx_Validate_credential")]
    pub fn validate_credential(&self, cred: &[u8], timeout: Duration) -> Result<Vec<Info>> {
        let mut bo = bytes_to_raw(cred);
        let done = Completion::<(i32, Vec<Info>)>::new();
        let cbdata = done.lend();
        // SAFETY: bo is valid for the call, which packs it before returning.
        let rc = unsafe {
            sys::PMIx_Validate_credential_nb(&bo, std::ptr::null(), 0, Some(validation_cb), cbdata)
        };
        // SAFETY: bo was malloc'ed by bytes_to_raw.
        unsafe { sys::mpmix_byte_object_destruct(&mut bo) };
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come.
            unsafe { Completion::<(i32, Vec<Info>)>::reclaim(cbdata) };
            return Err(from_status("PMIx_Validate_credential", rc, None));
        }
        match done.wait(timeout) {
            Some((0, info)) => Ok(info),
            Some((rc, _)) => Err(from_status("PMIx_Validate_credential", rc, None)),
            None => Err(Error::Timeout {
                op: "PMIx_Validate_credential",
            }),
        }
    }

    /// Asks the host about itself and its jobs (`PMIx_Query_info`).
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::NotSupported`] when the host answers no queries
    /// (Slurm); [`Error::NotFound`] when it knows none of the keys.
    #[doc(alias = "PMIx_Query_info")]
    pub fn query(&self, queries: &[Query], timeout: Duration) -> Result<Vec<Info>> {
        query_info(queries, timeout)
    }

    /// Asks the host for the fabric it knows (`PMIx_Fabric_register`): the
    /// `PMIX_FABRIC_*` infos (devices, vendor, ...) the host's `fabric` upcall returns.
    ///
    /// # Errors
    /// [`Error::NotSupported`] when the host has no fabric information (Slurm, mpirun, and
    /// OpenPMIx itself on nodes without a fabric plugin); [`Error::Timeout`].
    #[doc(alias = "PMIx_Fabric_register")]
    pub fn fabric_register(&self, timeout: Duration) -> Result<Vec<Info>> {
        self.fabric(timeout, false)
    }

    /// As [`Client::fabric_register`], then `PMIx_Fabric_update`: the host's current view
    /// (link states now, not at launch).
    ///
    /// # Errors
    /// As [`Client::fabric_register`].
    #[doc(alias = "PMIx_Fabric_update")]
    pub fn fabric_update(&self, timeout: Duration) -> Result<Vec<Info>> {
        self.fabric(timeout, true)
    }

    fn fabric(&self, timeout: Duration, update: bool) -> Result<Vec<Info>> {
        // PMIx writes the answer into the struct when it calls back, so the struct lives
        // on the heap and is only freed once PMIx is done with it (leaked on timeout).
        let fabric = Box::into_raw(Box::new(sys::pmix_fabric_t::default()));
        let mut result = call_op(
            "PMIx_Fabric_register",
            timeout,
            None,
            // SAFETY: fabric stays valid until the callback (or forever, on timeout).
            |cbdata| unsafe {
                sys::PMIx_Fabric_register_nb(fabric, std::ptr::null(), 0, Some(op_cb), cbdata)
            },
        );
        if update && result.is_ok() {
            result = call_op(
                "PMIx_Fabric_update",
                timeout,
                None,
                // SAFETY: `fabric` (registered just now) stays valid until the callback, or
                // forever on timeout (leaked).
                |cbdata| unsafe { sys::PMIx_Fabric_update_nb(fabric, Some(op_cb), cbdata) },
            );
        }
        if let Err(Error::Timeout { op }) = result {
            return Err(Error::Timeout { op });
        }
        // SAFETY: PMIx has called back (or failed synchronously): the struct is ours.
        let fabric = unsafe { Box::from_raw(fabric) };
        let infos = if result.is_ok() {
            // SAFETY: filled by PMIx with `ninfo` infos.
            unsafe { Info::vec_from_raw(fabric.info, fabric.ninfo) }
        } else {
            Vec::new()
        };
        if !fabric.info.is_null() {
            let mut f = *fabric;
            // SAFETY: releases what PMIx attached to the registered fabric.
            let rc = unsafe { sys::PMIx_Fabric_deregister(&mut f) };
            if let Err(e) = check("PMIx_Fabric_deregister", rc) {
                tracing::debug!("{e}");
            }
        }
        result.map(|()| infos)
    }

    /// Asks the host to abort the job with `status`; the host normally kills this process.
    ///
    /// # Errors
    /// PMIx errors when the host refuses.
    #[doc(alias = "PMIx_Abort")]
    pub fn abort(&self, status: i32, msg: &str) -> Result<()> {
        let cmsg = cstring(msg, "abort message")?;
        // SAFETY: NULL procs = the whole job.
        let rc = unsafe { sys::PMIx_Abort(status, cmsg.as_ptr(), std::ptr::null_mut(), 0) };
        check("PMIx_Abort", rc)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: PMIx was initialised by this client; finalisation always returns.
        let rc = unsafe { sys::PMIx_Finalize(std::ptr::null(), 0) };
        if let Err(e) = check("PMIx_Finalize", rc) {
            tracing::warn!("{e}");
        }
    }
}

/// Seconds for a `PMIX_TIMEOUT` directive (at least 1: PMIx treats 0 as "forever").
pub(crate) fn timeout_secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

fn expect_u64(key: &str, v: Value) -> Result<u64> {
    v.as_u64().ok_or_else(|| Error::WrongType {
        key: key.into(),
        expected: "unsigned integer",
        got: v.type_name(),
    })
}

fn expect_string(key: &str, v: Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(Error::WrongType {
            key: key.into(),
            expected: "string",
            got: other.type_name(),
        }),
    }
}

unsafe extern "C" fn value_cb(status: i32, kv: *mut sys::pmix_value_t, cbdata: *mut c_void) {
    crate::ffi::guard("PMIx callback value_cb", (), || {
        let v = if kv.is_null() {
            None
        } else {
            // SAFETY: PMIx lends a valid value for the call.
            Some(unsafe { Value::from_raw(kv) })
        };
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, Option<Value>)>::complete(cbdata, (status, v)) };
    })
}

unsafe extern "C" fn lookup_cb(
    status: i32,
    data: *mut sys::pmix_pdata_t,
    ndata: usize,
    cbdata: *mut c_void,
) {
    crate::ffi::guard("PMIx callback lookup_cb", (), || {
        let found = if data.is_null() {
            Vec::new()
        } else {
            (0..ndata)
                .map(|i| {
                    // SAFETY: PMIx lends `ndata` valid entries.
                    let d = unsafe { &*data.add(i) };
                    Published {
                        // SAFETY: valid entry.
                        publisher: unsafe { Proc::from_raw(&d.proc_) },
                        key: fixed_str(&d.key),
                        // SAFETY: valid entry.
                        value: unsafe { Value::from_raw(&d.value) },
                    }
                })
                .collect()
        };
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, Vec<Published>)>::complete(cbdata, (status, found)) };
    })
}

unsafe extern "C" fn credential_cb(
    status: i32,
    credential: *mut sys::pmix_byte_object_t,
    info: *mut sys::pmix_info_t,
    ninfo: usize,
    cbdata: *mut c_void,
) {
    crate::ffi::guard("PMIx callback credential_cb", (), || {
        let cred = if credential.is_null() {
            None
        } else {
            Some(Credential {
                // SAFETY: PMIx lends a valid byte object for the call.
                bytes: bytes_from_raw(unsafe { &*credential }),
                // SAFETY: PMIx lends `ninfo` infos for the call.
                info: unsafe { Info::vec_from_raw(info, ninfo) },
            })
        };
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, Option<Credential>)>::complete(cbdata, (status, cred)) };
    })
}

unsafe extern "C" fn validation_cb(
    status: i32,
    info: *mut sys::pmix_info_t,
    ninfo: usize,
    cbdata: *mut c_void,
) {
    crate::ffi::guard("PMIx callback validation_cb", (), || {
        // SAFETY: PMIx lends `ninfo` infos for the call.
        let v = unsafe { Info::vec_from_raw(info, ninfo) };
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, Vec<Info>)>::complete(cbdata, (status, v)) };
    })
}

/// The C form of a spawn request, owned until PMIx calls back.
struct SpawnArgs {
    apps: Vec<sys::pmix_app_t>,
    job_info: crate::value::InfoArray,
    _strings: Vec<std::ffi::CString>,
    _argvs: Vec<CArgv>,
    _infos: Vec<crate::value::InfoArray>,
}

// SAFETY: owned memory that PMIx only reads; the raw pointers point into the fields.
unsafe impl Send for SpawnArgs {}

impl SpawnArgs {
    fn new(apps: &[crate::value::App], job_info: &[Info]) -> Result<SpawnArgs> {
        let mut out = SpawnArgs {
            apps: Vec::with_capacity(apps.len()),
            job_info: infos(job_info)?,
            _strings: Vec::new(),
            _argvs: Vec::new(),
            _infos: Vec::new(),
        };
        for app in apps {
            let mut text = |s: &str, what| -> Result<*mut std::os::raw::c_char> {
                if s.is_empty() {
                    return Ok(std::ptr::null_mut());
                }
                let c = cstring(s, what)?;
                let p = c.as_ptr().cast_mut();
                out._strings.push(c);
                Ok(p)
            };
            let (cmd, cwd) = (text(&app.cmd, "command")?, text(&app.cwd, "directory")?);
            let argv = CArgv::new(&app.argv.iter().map(String::as_str).collect::<Vec<_>>())?;
            let env = CArgv::new(&app.env.iter().map(String::as_str).collect::<Vec<_>>())?;
            let info = infos(&app.info)?;
            out.apps.push(sys::pmix_app_t {
                cmd,
                argv: argv.as_ptr(),
                env: env.as_ptr(),
                cwd,
                maxprocs: app.maxprocs,
                info: info.as_ptr(),
                ninfo: info.len(),
            });
            out._argvs.extend([argv, env]);
            out._infos.push(info);
        }
        Ok(out)
    }
}

/// The `pmix_spawn_cbfunc_t` for a `Completion<(i32, String)>`.
unsafe extern "C" fn spawn_cb(
    status: i32,
    nspace: *mut std::os::raw::c_char,
    cbdata: *mut std::ffi::c_void,
) {
    crate::ffi::guard("PMIx callback spawn_cb", (), || {
        // SAFETY: PMIx passes NULL or a NUL-terminated namespace valid for the call.
        let nspace = unsafe { crate::value::cstr_lossy(nspace) };
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, String)>::complete(cbdata, (status, nspace)) };
    })
}
