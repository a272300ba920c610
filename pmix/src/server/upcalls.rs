//! The C functions placed in `pmix_server_module_t`: each copies its arguments into Rust
//! types, wraps the callback in a reply object and calls the installed [`Host`].

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, RwLock};

use pmix_sys as sys;

use crate::error::Status;
use crate::ffi::guard;
use crate::query::Query;
use crate::server::host::{App, GroupOp, Host};
use crate::server::iof::IofChannels;
use crate::server::reply::{
    CredentialReply, InfoReply, LookupReply, ModexReply, OpReply, SpawnReply, ToolReply,
    ValidationReply,
};
use crate::value::Info;
use crate::value::Proc;
use crate::value::{bytes_from_raw, cstr_lossy};

/// The host of this process's server (one per process).
pub(crate) static HOST: RwLock<Option<Arc<dyn Host>>> = RwLock::new(None);

/// The installed host, if the server is up.
fn host() -> Option<Arc<dyn Host>> {
    HOST.read().ok().and_then(|h| h.clone())
}

const OK: i32 = sys::PMIX_SUCCESS as i32;

/// Runs `f` with the host. Without one (only between finalisation and process exit), `f`
/// is dropped, which drops the reply it captured, which answers with an error; a host that
/// panics drops it too, while unwinding (the panic is logged, not propagated into C):
/// either way the upcall is answered through its callback, so the return value is always
/// SUCCESS.
fn with_host(f: impl FnOnce(&dyn Host)) -> i32 {
    guard("the PMIx host", OK, || {
        if let Some(h) = host() {
            f(h.as_ref());
        }
        OK
    })
}

/// What an upcall returns when it panicked before it could hand its reply on (no callback
/// will come).
const PANICKED: i32 = sys::PMIX_ERROR;

/// Defines an upcall of the server module: an `unsafe extern "C"` function whose body runs
/// behind the panic guard, named "PMIx upcall NAME" in the log. A panic never unwinds into
/// PMIx: it is logged and the upcall returns the value given after the result type
/// ([`PANICKED`] for a status: no callback will come; `()` for a void upcall).
macro_rules! upcall {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $ret:ty, $panicked:expr => $body:block) => {
        $(#[$m])*
        pub(crate) unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            guard(concat!("PMIx upcall ", stringify!($name)), $panicked, || $body)
        }
    };
}

/// # Safety
/// `p` must be NULL or a valid proc.
unsafe fn proc_opt(p: *const sys::pmix_proc_t) -> Option<Proc> {
    // SAFETY: `p` is NULL (not read) or a valid proc (this function's contract).
    (!p.is_null()).then(|| unsafe { Proc::from_raw(p) })
}

/// # Safety
/// `argv` must be NULL or a NULL-terminated array of C strings.
unsafe fn argv_vec(argv: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    let mut i = 0;
    // SAFETY: NULL-terminated array.
    unsafe {
        while !(*argv.add(i)).is_null() {
            out.push(cstr_lossy(*argv.add(i)));
            i += 1;
        }
    }
    out
}

/// Copies the (requesting proc, infos) pair most upcalls receive.
///
/// # Safety
/// `p` must be a valid proc and `info` NULL or `n` valid infos.
unsafe fn proc_and_infos(
    p: *const sys::pmix_proc_t,
    info: *const sys::pmix_info_t,
    n: usize,
) -> (Proc, Vec<Info>) {
    // SAFETY: `p` is a valid proc and `info` NULL or `n` valid infos (this function's contract).
    unsafe { (Proc::from_raw(p), Info::vec_from_raw(info, n)) }
}

/// Copies the (requesting proc, keys, infos) triple of lookup and unpublish.
///
/// # Safety
/// As [`proc_and_infos`], and `keys` NULL or a NULL-terminated string array.
unsafe fn proc_keys_infos(
    p: *const sys::pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const sys::pmix_info_t,
    n: usize,
) -> (Proc, Vec<String>, Vec<Info>) {
    // SAFETY: `p`, `info` and `n` as `proc_and_infos` requires (this function's contract).
    let (p, infos) = unsafe { proc_and_infos(p, info, n) };
    // SAFETY: `keys` is NULL or a NULL-terminated string array (this function's contract).
    (p, unsafe { argv_vec(keys) }, infos)
}

/// # Safety
/// `procs` must be NULL or point to `n` valid procs.
unsafe fn procs_vec(procs: *const sys::pmix_proc_t, n: usize) -> Vec<Proc> {
    if procs.is_null() {
        return Vec::new();
    }
    // SAFETY: `n` valid procs.
    (0..n)
        .map(|i| unsafe { Proc::from_raw(procs.add(i)) })
        .collect()
}

upcall! {
    fn client_connected(
        proc_: *const sys::pmix_proc_t,
        _server_object: *mut c_void,
        _cbfunc: sys::pmix_op_cbfunc_t,
        _cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx passes a valid proc. (In 4.2 cbfunc is NULL: returning SUCCESS is the
        // answer.)
        let p = unsafe { Proc::from_raw(proc_) };
        let mut answer = OK;
        with_host(|h| {
            if let Err(status) = h.client_connected(&p) {
                answer = status.0;
            }
        });
        answer
    }
}

upcall! {
    fn client_finalized(
        proc_: *const sys::pmix_proc_t,
        _server_object: *mut c_void,
        cbfunc: sys::pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx passes a valid proc.
        let p = unsafe { Proc::from_raw(proc_) };
        with_host(|h| h.client_finalized(&p));
        OpReply::new(cbfunc, cbdata).send(Ok(()));
        OK
    }
}

upcall! {
    fn abort(
        proc_: *const sys::pmix_proc_t,
        _server_object: *mut c_void,
        status: c_int,
        msg: *const c_char,
        procs: *mut sys::pmix_proc_t,
        nprocs: usize,
        cbfunc: sys::pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc), `msg` (NULL or a C string) and `procs` (NULL
        // or `nprocs` procs) until this returns; all are copied.
        let (p, m, targets) = unsafe {
            (
                Proc::from_raw(proc_),
                cstr_lossy(msg),
                procs_vec(procs, nprocs),
            )
        };
        let reply = OpReply::new(cbfunc, cbdata);
        with_host(|h| h.abort(&p, status, &m, targets, reply))
    }
}

upcall! {
    fn fence_nb(
        procs: *const sys::pmix_proc_t,
        nprocs: usize,
        info: *const sys::pmix_info_t,
        ninfo: usize,
        data: *mut c_char,
        ndata: usize,
        cbfunc: sys::pmix_modex_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `procs` (`nprocs` procs), `info` (NULL or `ninfo` infos) and `data`
        // (NULL or `ndata` bytes) until this returns; all are copied.
        let (ps, infos, blob) = unsafe {
            (
                procs_vec(procs, nprocs),
                Info::vec_from_raw(info, ninfo),
                bytes_from_raw(&sys::pmix_byte_object_t {
                    bytes: data,
                    size: ndata,
                }),
            )
        };
        let reply = ModexReply::new(cbfunc, cbdata);
        with_host(|h| h.fence(ps, infos, blob, reply))
    }
}

upcall! {
    fn direct_modex(
        proc_: *const sys::pmix_proc_t,
        info: *const sys::pmix_info_t,
        ninfo: usize,
        cbfunc: sys::pmix_modex_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc) and `info` (NULL or `ninfo` infos) until this
        // returns; both are copied.
        let (p, infos) = unsafe { proc_and_infos(proc_, info, ninfo) };
        let reply = ModexReply::new(cbfunc, cbdata);
        with_host(|h| h.direct_modex(&p, infos, reply))
    }
}

upcall! {
    fn publish(
        proc_: *const sys::pmix_proc_t,
        info: *const sys::pmix_info_t,
        ninfo: usize,
        cbfunc: sys::pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc) and `info` (NULL or `ninfo` infos) until this
        // returns; both are copied.
        let (p, infos) = unsafe { proc_and_infos(proc_, info, ninfo) };
        let reply = OpReply::new(cbfunc, cbdata);
        with_host(|h| h.publish(&p, infos, reply))
    }
}

upcall! {
    fn lookup(
        proc_: *const sys::pmix_proc_t,
        keys: *mut *mut c_char,
        info: *const sys::pmix_info_t,
        ninfo: usize,
        cbfunc: sys::pmix_lookup_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc), `keys` (NULL or a NULL-terminated string
        // array) and `info` (NULL or `ninfo` infos) until this returns; all are copied.
        let (p, ks, infos) = unsafe { proc_keys_infos(proc_, keys, info, ninfo) };
        let reply = LookupReply::new(cbfunc, cbdata);
        with_host(|h| h.lookup(&p, ks, infos, reply))
    }
}

upcall! {
    fn unpublish(
        proc_: *const sys::pmix_proc_t,
        keys: *mut *mut c_char,
        info: *const sys::pmix_info_t,
        ninfo: usize,
        cbfunc: sys::pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc), `keys` (NULL or a NULL-terminated string
        // array) and `info` (NULL or `ninfo` infos) until this returns; all are copied.
        let (p, ks, infos) = unsafe { proc_keys_infos(proc_, keys, info, ninfo) };
        let reply = OpReply::new(cbfunc, cbdata);
        with_host(|h| h.unpublish(&p, ks, infos, reply))
    }
}

upcall! {
    fn register_events(
        _codes: *mut i32,
        _ncodes: usize,
        _info: *const sys::pmix_info_t,
        _ninfo: usize,
        _cbfunc: sys::pmix_op_cbfunc_t,
        _cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // Nothing to forward on a single node: the library delivers locally.
        sys::PMIX_OPERATION_SUCCEEDED
    }
}

upcall! {
    fn deregister_events(
        _codes: *mut i32,
        _ncodes: usize,
        _cbfunc: sys::pmix_op_cbfunc_t,
        _cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        sys::PMIX_OPERATION_SUCCEEDED
    }
}

upcall! {
    fn notify_event(
        code: i32,
        source: *const sys::pmix_proc_t,
        _range: sys::pmix_data_range_t,
        info: *mut sys::pmix_info_t,
        ninfo: usize,
        _cbfunc: sys::pmix_op_cbfunc_t,
        _cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `source` (NULL or a valid proc) and `info` (NULL or `ninfo` infos)
        // until this returns; both are copied.
        let (src, infos) = unsafe { (proc_opt(source), Info::vec_from_raw(info, ninfo)) };
        if let Some(h) = host() {
            h.notify_event(Status(code), src.as_ref(), &infos);
        }
        // PMIx 4.2.2 holds a lock around this upcall: calling cbfunc here deadlocks and
        // returning SUCCESS ("later") is not counted. OPERATION_SUCCEEDED, no callback.
        sys::PMIX_OPERATION_SUCCEEDED
    }
}

upcall! {
    fn query(
        proct: *mut sys::pmix_proc_t,
        queries: *mut sys::pmix_query_t,
        nqueries: usize,
        cbfunc: sys::pmix_info_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        let qs: Vec<Query> = if queries.is_null() {
            Vec::new()
        } else {
            (0..nqueries)
                .map(|i| {
                    // SAFETY: `queries` is non-NULL here and PMIx lends `nqueries` queries there
                    // until this returns; each is copied.
                    let q = unsafe { &*queries.add(i) };
                    Query {
                        // SAFETY: NULL-terminated key list and `nqual` qualifiers.
                        keys: unsafe { argv_vec(q.keys) },
                        // SAFETY: libpmix passes `nqual` qualifiers at `q.qualifiers` for
                        // the duration of the upcall.
                        qualifiers: unsafe { Info::vec_from_raw(q.qualifiers, q.nqual) },
                    }
                })
                .collect()
        };
        // SAFETY: NULL or valid.
        let requestor = unsafe { proc_opt(proct) };
        let reply = InfoReply::new(cbfunc, cbdata);
        with_host(|h| h.query(requestor.as_ref(), qs, reply))
    }
}

upcall! {
    fn tool_connected(
        info: *mut sys::pmix_info_t,
        ninfo: usize,
        cbfunc: sys::pmix_tool_connection_cbfunc_t,
        cbdata: *mut c_void,
    ) -> (), () => {
        // SAFETY: PMIx lends `info` (NULL or `ninfo` infos) until this returns; they are
        // copied.
        let infos = unsafe { Info::vec_from_raw(info, ninfo) };
        let reply = ToolReply::new(cbfunc, cbdata);
        with_host(|h| h.tool_connected(infos, reply));
    }
}

upcall! {
    fn log(
        client: *const sys::pmix_proc_t,
        data: *const sys::pmix_info_t,
        ndata: usize,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> (), () => {
        // SAFETY: PMIx lends `client` (NULL or a valid proc), `data` (NULL or `ndata` infos) and
        // `directives` (NULL or `ndirs` infos) until this returns; all are copied.
        let (p, infos, dirs) = unsafe {
            (
                proc_opt(client),
                Info::vec_from_raw(data, ndata),
                Info::vec_from_raw(directives, ndirs),
            )
        };
        let reply = OpReply::new(cbfunc, cbdata);
        match p {
            Some(p) => {
                with_host(|h| h.log(&p, infos, dirs, reply));
            }
            None => reply.send(Err(Status(sys::PMIX_ERR_BAD_PARAM))),
        }
    }
}

upcall! {
    fn job_control(
        requestor: *const sys::pmix_proc_t,
        targets: *const sys::pmix_proc_t,
        ntargets: usize,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_info_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `requestor` (NULL or a valid proc), `targets` (NULL or `ntargets`
        // procs) and `directives` (NULL or `ndirs` infos) until this returns; all are copied.
        let (p, targets, dirs) = unsafe {
            (
                proc_opt(requestor),
                procs_vec(targets, ntargets),
                Info::vec_from_raw(directives, ndirs),
            )
        };
        let reply = InfoReply::new(cbfunc, cbdata);
        match p {
            Some(p) => with_host(|h| h.job_control(&p, targets, dirs, reply)),
            None => {
                reply.send(Status(sys::PMIX_ERR_BAD_PARAM), Vec::new());
                OK
            }
        }
    }
}

upcall! {
    fn group(
        op: sys::pmix_group_operation_t,
        grp: *mut c_char,
        procs: *const sys::pmix_proc_t,
        nprocs: usize,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_info_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `grp` (a C string), `procs` (NULL or `nprocs` procs) and `directives`
        // (NULL or `ndirs` infos) until this returns; all are copied.
        let (name, members, dirs) = unsafe {
            (
                cstr_lossy(grp),
                procs_vec(procs, nprocs),
                Info::vec_from_raw(directives, ndirs),
            )
        };
        let reply = InfoReply::new(cbfunc, cbdata);
        let op = match op {
            sys::pmix_group_operation_t_PMIX_GROUP_CONSTRUCT => GroupOp::Construct,
            sys::pmix_group_operation_t_PMIX_GROUP_DESTRUCT => GroupOp::Destruct,
            _ => {
                reply.send(Status(sys::PMIX_ERR_BAD_PARAM), Vec::new());
                return OK;
            }
        };
        with_host(|h| h.group(op, &name, members, dirs, reply))
    }
}

/// # Safety
/// `apps` must be NULL or point to `n` valid apps.
unsafe fn apps_vec(apps: *const sys::pmix_app_t, n: usize) -> Vec<App> {
    if apps.is_null() {
        return Vec::new();
    }
    (0..n)
        .map(|i| {
            // SAFETY: `n` valid apps, each with valid (or NULL) strings and infos.
            unsafe {
                let a = &*apps.add(i);
                App {
                    cmd: if a.cmd.is_null() {
                        String::new()
                    } else {
                        cstr_lossy(a.cmd)
                    },
                    argv: argv_vec(a.argv),
                    env: argv_vec(a.env),
                    cwd: if a.cwd.is_null() {
                        String::new()
                    } else {
                        cstr_lossy(a.cwd)
                    },
                    maxprocs: a.maxprocs,
                    info: Info::vec_from_raw(a.info, a.ninfo),
                }
            }
        })
        .collect()
}

upcall! {
    fn spawn(
        requestor: *const sys::pmix_proc_t,
        job_info: *const sys::pmix_info_t,
        ninfo: usize,
        apps: *const sys::pmix_app_t,
        napps: usize,
        cbfunc: sys::pmix_spawn_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `requestor` (NULL or a valid proc), `job_info` (NULL or `ninfo` infos)
        // and `apps` (NULL or `napps` apps) until this returns; all are copied.
        let (p, infos, apps) = unsafe {
            (
                proc_opt(requestor),
                Info::vec_from_raw(job_info, ninfo),
                apps_vec(apps, napps),
            )
        };
        let reply = SpawnReply::new(cbfunc, cbdata);
        match p {
            Some(p) => with_host(|h| h.spawn(&p, infos, apps, reply)),
            None => {
                reply.send(Err(Status(sys::PMIX_ERR_BAD_PARAM)));
                OK
            }
        }
    }
}

/// `connect` and `disconnect`: the same arguments, copied and handed to `f` with the reply.
///
/// # Safety
/// `procs` NULL or `nprocs` valid procs, `info` NULL or `ninfo` valid infos.
unsafe fn connection(
    (procs, nprocs): (*const sys::pmix_proc_t, usize),
    (info, ninfo): (*const sys::pmix_info_t, usize),
    (cbfunc, cbdata): (sys::pmix_op_cbfunc_t, *mut c_void),
    f: fn(&dyn Host, Vec<Proc>, Vec<Info>, OpReply),
) -> i32 {
    // SAFETY: the caller's contract (`procs`: NULL or `nprocs` procs; `info`: NULL or `ninfo`
    // infos, valid for the call); both are copied.
    let (procs, infos) = unsafe { (procs_vec(procs, nprocs), Info::vec_from_raw(info, ninfo)) };
    let reply = OpReply::new(cbfunc, cbdata);
    with_host(|h| f(h, procs, infos, reply))
}

/// Defines the upcall `connect` or `disconnect` (same arguments) calling `$method`.
macro_rules! connection_upcall {
    ($name:ident, $method:ident) => {
        upcall! {
            fn $name(
                procs: *const sys::pmix_proc_t,
                nprocs: usize,
                info: *const sys::pmix_info_t,
                ninfo: usize,
                cbfunc: sys::pmix_op_cbfunc_t,
                cbdata: *mut c_void,
            ) -> i32, PANICKED => {
                // SAFETY: PMIx lends `procs` (NULL or `nprocs` procs) and `info` (NULL or
                // `ninfo` infos) until this returns: `connection`'s contract.
                unsafe {
                    connection(
                        (procs, nprocs),
                        (info, ninfo),
                        (cbfunc, cbdata),
                        |h, p, i, r| h.$method(p, i, r),
                    )
                }
            }
        }
    };
}

connection_upcall!(connect, connect);
connection_upcall!(disconnect, disconnect);

upcall! {
    fn iof_pull(
        procs: *const sys::pmix_proc_t,
        nprocs: usize,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        channels: sys::pmix_iof_channel_t,
        _cbfunc: sys::pmix_op_cbfunc_t,
        _cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // Answered synchronously, the callback never called (see `Host::iof_pull`).
        // SAFETY: PMIx lends `procs` (NULL or `nprocs` procs) and `directives` (NULL or `ndirs`
        // infos) until this returns; both are copied.
        let (procs, dirs) = unsafe {
            (
                procs_vec(procs, nprocs),
                Info::vec_from_raw(directives, ndirs),
            )
        };
        match host().map(|h| h.iof_pull(procs, dirs, IofChannels(channels))) {
            Some(Ok(())) => sys::PMIX_OPERATION_SUCCEEDED,
            Some(Err(s)) => s.0,
            None => sys::PMIX_ERR_INIT,
        }
    }
}

upcall! {
    fn get_credential(
        proc_: *const sys::pmix_proc_t,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_credential_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc) and `directives` (NULL or `ndirs` infos) until
        // this returns; both are copied.
        let (p, infos) = unsafe { proc_and_infos(proc_, directives, ndirs) };
        let reply = CredentialReply::new(cbfunc, cbdata);
        with_host(|h| h.get_credential(&p, infos, reply))
    }
}

upcall! {
    fn validate_credential(
        proc_: *const sys::pmix_proc_t,
        cred: *const sys::pmix_byte_object_t,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_validation_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `proc_` (a valid proc), `cred` (NULL or a byte object) and
        // `directives` (NULL or `ndirs` infos) until this returns; all are copied.
        let (p, bytes, infos) = unsafe {
            (
                Proc::from_raw(proc_),
                if cred.is_null() {
                    Vec::new()
                } else {
                    bytes_from_raw(&*cred)
                },
                Info::vec_from_raw(directives, ndirs),
            )
        };
        let reply = ValidationReply::new(cbfunc, cbdata);
        with_host(|h| h.validate_credential(&p, &bytes, infos, reply))
    }
}

upcall! {
    fn fabric(
        requestor: *const sys::pmix_proc_t,
        op: sys::pmix_fabric_operation_t,
        directives: *const sys::pmix_info_t,
        ndirs: usize,
        cbfunc: sys::pmix_info_cbfunc_t,
        cbdata: *mut c_void,
    ) -> i32, PANICKED => {
        // SAFETY: PMIx lends `requestor` (NULL or a valid proc) and `directives` (NULL or `ndirs`
        // infos) until this returns; both are copied.
        let (p, infos) = unsafe { (proc_opt(requestor), Info::vec_from_raw(directives, ndirs)) };
        let update = op == sys::pmix_fabric_operation_t_PMIX_FABRIC_UPDATE_INFO;
        let reply = InfoReply::new(cbfunc, cbdata);
        with_host(|h| h.fabric(p.as_ref(), update, infos, reply))
    }
}

/// What the module supports, as `PMIx_Register_attributes` wants it: each function of the
/// module this crate installs, with the attributes (PMIx's macro names) it honours, or
/// `NONE`. Registered after `PMIx_server_init`, so tools asking which attributes the host
/// supports (`pattrs --host all`) get an answer; without any registration OpenPMIx 4.2
/// crashes answering them.
pub(crate) const ATTRIBUTES: &[(&str, &[&str])] = &[
    ("client_connected", &["NONE"]),
    ("client_finalized", &["NONE"]),
    ("abort", &["NONE"]),
    ("fence_nb", &["NONE"]),
    ("direct_modex", &["NONE"]),
    (
        "publish",
        &["PMIX_RANGE", "PMIX_PERSISTENCE", "PMIX_TIMEOUT"],
    ),
    ("lookup", &["PMIX_RANGE", "PMIX_WAIT", "PMIX_TIMEOUT"]),
    ("unpublish", &["PMIX_RANGE"]),
    ("register_events", &["NONE"]),
    ("deregister_events", &["NONE"]),
    ("notify_event", &["NONE"]),
    ("query", &["PMIX_NSPACE"]),
    ("tool_connected", &["NONE"]),
    (
        "spawn",
        &[
            "PMIX_WDIR",
            "PMIX_NOTIFY_COMPLETION",
            "PMIX_DEBUG_STOP_IN_INIT",
        ],
    ),
    ("connect", &["PMIX_TIMEOUT"]),
    ("iof_pull", &["PMIX_IOF_STOP"]),
    ("disconnect", &["PMIX_TIMEOUT"]),
    ("log", &["NONE"]),
    (
        "job_control",
        &[
            "PMIX_JOB_CTRL_KILL",
            "PMIX_JOB_CTRL_TERMINATE",
            "PMIX_JOB_CTRL_SIGNAL",
            "PMIX_JOB_CTRL_PREEMPTIBLE",
            "PMIX_JOB_CTRL_CHECKPOINT",
        ],
    ),
    ("group", &["PMIX_GROUP_ASSIGN_CONTEXT_ID", "PMIX_TIMEOUT"]),
    ("get_credential", &["PMIX_CRED_TYPE"]),
    ("validate_credential", &["PMIX_CRED_TYPE"]),
    ("fabric", &["NONE"]),
];

/// The module handed to `PMIx_server_init`, filled field by field.
pub(crate) fn module() -> sys::pmix_server_module_t {
    sys::pmix_server_module_t {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        direct_modex: Some(direct_modex),
        publish: Some(publish),
        lookup: Some(lookup),
        unpublish: Some(unpublish),
        register_events: Some(register_events),
        deregister_events: Some(deregister_events),
        notify_event: Some(notify_event),
        query: Some(query),
        tool_connected: Some(tool_connected),
        spawn: Some(spawn),
        connect: Some(connect),
        iof_pull: Some(iof_pull),
        disconnect: Some(disconnect),
        log: Some(log),
        job_control: Some(job_control),
        group: Some(group),
        get_credential: Some(get_credential),
        validate_credential: Some(validate_credential),
        fabric: Some(fabric),
        ..Default::default()
    }
}
