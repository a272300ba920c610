//! `maestro_spank.so`: the maestro SPANK plugin, Slurm's own way to extend a launch.
//!
//! Loaded through `plugstack.conf` (`optional /PREFIX/lib/maestro_spank.so`), it adds
//!
//! - `srun --maestro-nic[=auto|none|NAME]` (or `SLURM_SPANK_MAESTRO_NIC` in the job's
//!   environment): in each task, after Slurm's CPU binding, the NIC the node's fabric
//!   inventory chooses for the task's CPUs (ties spread by local task id), or the NIC named,
//!   which must exist on the node (else the task fails with a message). It exports
//!   `MSTRO_OFI_IFACE` (the name libfabric knows the NIC by), `MSTRO_OFI_PROVIDER` for RDMA
//!   NICs unless the user set one, and `MSTRO_NIC_REASON` (why, in one line).
//! - `srun --maestro-bind=near-nic` (or `SLURM_SPANK_MAESTRO_BIND`): spreads the node's tasks
//!   over its NICs and binds each to CPUs local to its NIC (`maestro inventory --placement N`
//!   prints the same plan), or says why it cannot (locality unknown, too few CPUs there, a
//!   binding the user asked for with `--cpu-bind`).
//! - `srun --maestro-verbose` (or `SLURM_SPANK_MAESTRO_VERBOSE=1`): each task writes what
//!   was chosen to its stderr, i.e. the job's output.
//!
//! `MSTRO_TOPOLOGY=file.xml` in the job's environment makes the plugin read an hwloc XML
//! topology instead of the node's (to try placements of real machines on a test box).
//!
//! Bindings: our own bindgen crate `spank-sys` over Debian's `libslurm-dev` `slurm/spank.h`
//! rather than the `slurm-spank` crate, like the project's other `-sys` crates: the
//! structures and `SLURM_VERSION_NUMBER` then come from the very Slurm the plugin is built
//! for (a plugin whose version does not match is refused by Slurm), with no second copy of
//! the header to keep in step.

use std::ffi::{CStr, CString, c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};

use inventory::{IndexSet, NicRequest, Options};
use spank_sys as sys;

/// `SPANK_PLUGIN(maestro, SLURM_VERSION_NUMBER)`.
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 8] = *b"maestro\0";
/// The plugin's type.
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// The Slurm version the plugin was built against.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = sys::SLURM_VERSION_NUMBER;

/// The options table Slurm reads (`spank_options`).
#[repr(transparent)]
pub struct OptionTable([sys::spank_option; 4]);

// SAFETY: the table is immutable; its pointers point at static strings.
unsafe impl Sync for OptionTable {}

const NIC: usize = 0;
const BIND: usize = 1;
const VERBOSE: usize = 2;

const fn option(
    name: &'static CStr,
    arginfo: Option<&'static CStr>,
    usage: &'static CStr,
    has_arg: c_int,
    val: c_int,
    cb: sys::spank_opt_cb_f,
) -> sys::spank_option {
    sys::spank_option {
        name: name.as_ptr().cast_mut(),
        arginfo: match arginfo {
            Some(a) => a.as_ptr().cast_mut(),
            None => std::ptr::null_mut(),
        },
        usage: usage.as_ptr().cast_mut(),
        has_arg,
        val,
        cb,
    }
}

/// `--maestro-nic`, `--maestro-bind`, `--maestro-verbose`.
#[unsafe(no_mangle)]
pub static spank_options: OptionTable = OptionTable([
    option(
        c"maestro-nic",
        Some(c"auto|none|NAME"),
        c"Give each task the NIC the fabric inventory chooses for its CPUs (auto, the default), or the NIC named; exports MSTRO_OFI_IFACE",
        2,
        NIC as c_int,
        Some(check_nic),
    ),
    option(
        c"maestro-bind",
        Some(c"near-nic|none"),
        c"near-nic: spread the tasks of a node over its NICs and bind each to CPUs near its NIC",
        1,
        BIND as c_int,
        Some(check_bind),
    ),
    option(
        c"maestro-verbose",
        None,
        c"Each task writes the NIC and CPUs maestro chose to its stderr",
        0,
        VERBOSE as c_int,
        None,
    ),
    // SPANK_OPTIONS_TABLE_END: Slurm reads up to the NULL name.
    sys::spank_option {
        name: std::ptr::null_mut(),
        arginfo: std::ptr::null_mut(),
        usage: std::ptr::null_mut(),
        has_arg: 0,
        val: 0,
        cb: None,
    },
]);

/// Logs `msg` as a Slurm error (to the job's stderr in srun, the slurmd log remotely).
fn error(msg: &str) {
    let text = CString::new(format!("maestro: {msg}").replace('\0', " ")).unwrap_or_default();
    // SAFETY: a "%s" format with one valid C string.
    unsafe { sys::slurm_error(c"%s".as_ptr(), text.as_ptr()) };
}

/// The option's argument as text (NULL: empty).
///
/// # Safety
/// `optarg` is NULL or a C string.
unsafe fn arg(optarg: *const c_char) -> String {
    if optarg.is_null() {
        return String::new();
    }
    // SAFETY: Slurm passes the option's value as NULL (handled above) or a NUL-terminated
    // string.
    unsafe { CStr::from_ptr(optarg) }
        .to_string_lossy()
        .into_owned()
}

/// Checks `--maestro-nic`'s value where it is given (srun), so a bad one stops the launch.
unsafe extern "C" fn check_nic(_val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    // SAFETY: Slurm passes NULL or the argument string.
    let v = unsafe { arg(optarg) };
    guarded("--maestro-nic", || match NicRequest::parse(&v) {
        Ok(_) => 0,
        Err(e) => {
            error(&format!("--maestro-nic: {e}"));
            -1
        }
    })
}

/// Runs an option callback; a panic (a bug) becomes an error line and -1 rather than
/// unwinding into Slurm.
fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        error(&format!("{what}: internal error (panic); please report it"));
        -1
    })
}

/// Checks `--maestro-bind`'s value.
unsafe extern "C" fn check_bind(_val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    // SAFETY: Slurm passes NULL or the argument string.
    let v = unsafe { arg(optarg) };
    guarded("--maestro-bind", || match Bind::parse(&v) {
        Ok(_) => 0,
        Err(e) => {
            error(&e);
            -1
        }
    })
}

/// `--maestro-bind`'s values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bind {
    NearNic,
    None,
}

impl Bind {
    fn parse(v: &str) -> Result<Bind, String> {
        match v.trim() {
            "near-nic" => Ok(Bind::NearNic),
            "none" | "" => Ok(Bind::None),
            other => Err(format!("--maestro-bind={other}: use near-nic or none")),
        }
    }
}

/// True if a SPANK call succeeded.
fn ok(rc: sys::spank_err_t) -> bool {
    rc == sys::ESPANK_SUCCESS
}

/// A SPANK handle with the calls the plugin makes.
struct Spank(sys::spank_t);

impl Spank {
    /// `Some(argument)` if option `idx` was given (an empty string when it has none).
    fn option(&self, idx: usize) -> Option<String> {
        let mut optarg: *mut c_char = std::ptr::null_mut();
        let opt = std::ptr::from_ref(&spank_options.0[idx]).cast_mut();
        // SAFETY: a valid handle in a callback that allows getopt; `opt` is one of our
        // registered options; `optarg` receives NULL or a string owned by Slurm.
        let rc = unsafe { sys::spank_option_getopt(self.0, opt, &mut optarg) };
        // SAFETY: NULL or a string Slurm owns for the callback's duration.
        ok(rc).then(|| unsafe { arg(optarg) })
    }

    /// The job's environment variable `var`.
    fn getenv(&self, var: &str) -> Option<String> {
        let name = CString::new(var).ok()?;
        let mut buf = vec![0 as c_char; 4096];
        // SAFETY: a valid handle; `buf` has the length passed.
        let rc = unsafe {
            sys::spank_getenv(self.0, name.as_ptr(), buf.as_mut_ptr(), buf.len() as c_int)
        };
        if !ok(rc) {
            return None;
        }
        // SAFETY: spank_getenv wrote a NUL-terminated string into `buf`.
        let v = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Some(v.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
    }

    /// Sets `var` in the task's environment (`overwrite`: replace a value already there).
    fn setenv(&self, var: &str, value: &str, overwrite: bool) -> Result<(), String> {
        let (n, v) = (
            CString::new(var).map_err(|e| e.to_string())?,
            CString::new(value).map_err(|e| e.to_string())?,
        );
        // SAFETY: a valid handle and C strings.
        let rc =
            unsafe { sys::spank_setenv(self.0, n.as_ptr(), v.as_ptr(), c_int::from(overwrite)) };
        if ok(rc) || (!overwrite && rc == sys::slurm_err_t_ESPANK_ENV_EXISTS) {
            Ok(())
        } else {
            Err(format!(
                "cannot set {var} in the task's environment (spank error {rc})"
            ))
        }
    }

    /// A `u32` item of the task.
    fn item_u32(&self, item: sys::spank_item) -> Option<u32> {
        let mut v: u32 = 0;
        // SAFETY: items of type uint32_t* take a pointer to one.
        let rc = unsafe { sys::spank_get_item(self.0, item, &mut v as *mut u32) };
        ok(rc).then_some(v)
    }

    /// An `int` item of the task.
    fn item_int(&self, item: sys::spank_item) -> Option<u32> {
        let mut v: c_int = 0;
        // SAFETY: items of type int* take a pointer to one.
        let rc = unsafe { sys::spank_get_item(self.0, item, &mut v as *mut c_int) };
        ok(rc).then_some(v).and_then(|v| u32::try_from(v).ok())
    }
}

/// Binds this process (the task, before it runs the program) to `cpus`.
fn bind(cpus: &IndexSet) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET within its size; sched_setaffinity on
    // this process with the set's size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus.iter() {
            if (c as usize) < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c as usize, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What a task is given, done in the task itself before it runs the program.
fn task_init(sp: &Spank) -> Result<(), String> {
    let nic = sp
        .option(NIC)
        .or_else(|| sp.getenv("SLURM_SPANK_MAESTRO_NIC"));
    let placing = sp
        .option(BIND)
        .or_else(|| sp.getenv("SLURM_SPANK_MAESTRO_BIND"));
    let verbose =
        sp.option(VERBOSE).is_some() || sp.getenv("SLURM_SPANK_MAESTRO_VERBOSE").is_some();
    let request = match &nic {
        Some(v) => NicRequest::parse(v).map_err(|e| format!("--maestro-nic: {e}"))?,
        None => None,
    };
    let placing = match &placing {
        Some(v) => Bind::parse(v)?,
        None => Bind::None,
    };
    if request.is_none() && placing == Bind::None {
        return Ok(());
    }
    let topology = sp.getenv("MSTRO_TOPOLOGY").map(std::path::PathBuf::from);
    let foreign = topology.is_some();
    let inv = inventory::collect(&Options {
        topology,
        ..Options::default()
    })
    .map_err(|e| format!("fabric inventory: {e}"))?;
    let local_id = sp.item_int(sys::spank_item::S_TASK_ID).unwrap_or(0);
    let global_id = sp
        .item_u32(sys::spank_item::S_TASK_GLOBAL_ID)
        .unwrap_or(local_id);
    let say = |what: &str| {
        if verbose {
            eprintln!(
                "maestro-spank: task {global_id} on {}: {what}",
                inv.hostname
            );
        }
    };
    if placing == Bind::NearNic {
        place_near_nic(sp, &inv, (local_id, foreign), &say)?;
    }
    if let Some(req) = request {
        set_nic(sp, &inv, local_id, &req, &say)?;
    }
    Ok(())
}

/// Binds the task to the CPUs near its NIC (`--maestro-bind=near-nic`), unless the user
/// asked for a binding of their own or the topology is another machine's (`foreign`);
/// says what it did through `say`.
///
/// # Errors
/// No placement for this task.
fn place_near_nic(
    sp: &Spank,
    inv: &inventory::Inventory,
    (local_id, foreign): (u32, bool),
    say: &dyn Fn(&str),
) -> Result<(), String> {
    let tasks = sp
        .item_u32(sys::spank_item::S_JOB_LOCAL_TASK_COUNT)
        .unwrap_or(1);
    // A binding the user asked for has a type and, for masks and maps, a list: Slurm
    // reports "mask_cpu:" with no list when nobody asked (even with --cpu-bind=none).
    let list = sp.getenv("SLURM_CPU_BIND_LIST").unwrap_or_default();
    let user_bind = sp.getenv("SLURM_CPU_BIND_TYPE").filter(|t| {
        let t = t.trim_end_matches(',');
        let needs_list = t.contains("mask_") || t.contains("map_");
        !t.is_empty() && !t.starts_with("none") && (!needs_list || !list.trim().is_empty())
    });
    let plan = inventory::placement(inv, tasks).map_err(|e| e.to_string())?;
    let mine = plan
        .get(local_id as usize)
        .ok_or("no placement for this task")?;
    match (&user_bind, &mine.cpus) {
        (_, Some(cpus)) if foreign => say(&format!(
            "near-nic placement shown, not applied (MSTRO_TOPOLOGY describes another machine): CPUs {cpus} ({})",
            mine.note
        )),
        (Some(kind), _) => say(&format!(
            "near-nic placement not applied: the binding --cpu-bind asked for ({kind}) is kept"
        )),
        (None, None) => say(&format!("near-nic placement not applied: {}", mine.note)),
        (None, Some(cpus)) => match bind(cpus) {
            Ok(()) => say(&format!("bound to CPUs {cpus} ({})", mine.note)),
            Err(e) => say(&format!(
                "near-nic placement not applied: cannot bind to CPUs {cpus} ({e}); {}",
                mine.note
            )),
        },
    }
    Ok(())
}

/// Chooses the task's NIC for `req` (`--maestro-nic`) among the CPUs it runs on and sets
/// `MSTRO_OFI_IFACE`, `MSTRO_OFI_PROVIDER` (unless set) and `MSTRO_NIC_REASON`.
///
/// # Errors
/// The task's CPUs cannot be read, no NIC fits, or the environment cannot be set.
fn set_nic(
    sp: &Spank,
    inv: &inventory::Inventory,
    local_id: u32,
    req: &NicRequest,
    say: &dyn Fn(&str),
) -> Result<(), String> {
    let cpus = inventory::process_cpuset().map_err(|e| format!("reading the task's CPUs: {e}"))?;
    // An XML topology's CPUs are not this machine's: choose for all of them.
    let cpus = if cpus.iter().all(|c| inv.machine.cpus.iter().any(|m| m == c)) {
        cpus
    } else {
        inv.machine.cpus.clone()
    };
    let t = inventory::task_nic(inv, &cpus, local_id, req).map_err(|e| e.to_string())?;
    let why = t.reasons.join("; ");
    sp.setenv("MSTRO_OFI_IFACE", &t.iface, true)?;
    if let Some(p) = &t.provider {
        sp.setenv("MSTRO_OFI_PROVIDER", p, false)?;
    }
    sp.setenv("MSTRO_NIC_REASON", &format!("{}: {why}", t.nic), true)?;
    say(&format!(
        "NIC {} (MSTRO_OFI_IFACE={}): {why}",
        t.nic, t.iface
    ));
    Ok(())
}

/// Called by Slurm in each task just before it runs the program (after CPU binding).
///
/// # Safety
/// Called by Slurm with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    match catch_unwind(AssertUnwindSafe(|| task_init(&Spank(sp)))) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            error(&msg);
            -1
        }
        Err(_) => {
            error("internal error (panic) choosing the task's NIC; please report it");
            -1
        }
    }
}
