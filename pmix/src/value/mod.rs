//! Typed PMIx data: [`Value`], [`Info`] (key + value), [`Proc`] (namespace + rank), and the
//! conversions to and from the C structs (`pmix_value_t`, `pmix_info_t`, `pmix_proc_t`).
//!
//! Conversions into C allocate with `malloc` (as the PMIx macros do), so PMIx's own
//! destructors free them; conversions out of C copy, so nothing borrowed from PMIx outlives
//! the callback that lent it.

mod cconv;
mod cstr;
mod info;

pub(crate) use cconv::{bytes_from_raw, bytes_to_raw};
pub(crate) use cstr::{copy_cstr, cstr_lossy, cstring, fixed_str};
pub(crate) use info::InfoArray;
pub use info::{Info, find};

/// One application of a `PMIx_Spawn` request (`pmix_app_t`): what to run and how many
/// copies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct App {
    /// The executable (`cmd`; may be empty when `argv[0]` names it).
    pub cmd: String,
    /// The arguments, `argv[0]` included (OpenPMIx's clients put the command there).
    pub argv: Vec<String>,
    /// `NAME=VALUE` entries to add to the processes' environment.
    pub env: Vec<String>,
    /// The working directory (empty: the host's choice).
    pub cwd: String,
    /// How many processes to start (PMIx says `maxprocs`; 0 or less asks for none).
    pub maxprocs: i32,
    /// Per-application directives (`PMIX_WDIR`, `PMIX_PREFIX`, ...).
    pub info: Vec<Info>,
}

use std::ffi::{c_char, c_void};
use std::fmt;

use pmix_sys as sys;

use crate::error::{Error, Result, Status};
use cconv::{alloc_copy, darray_from_raw, data_array, strdup};

/// A PMIx rank (`pmix_rank_t`).
pub type Rank = u32;

/// `PMIX_RANK_WILDCARD`: all ranks of a namespace; job-level keys live here.
pub const RANK_WILDCARD: Rank = sys::PMIX_RANK_WILDCARD;
/// `PMIX_RANK_UNDEF`.
pub const RANK_UNDEF: Rank = sys::PMIX_RANK_UNDEF;

/// A process name: namespace (at most 255 bytes) and rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Proc {
    /// The namespace (job) the process belongs to.
    pub nspace: String,
    /// The rank within the namespace, or [`RANK_WILDCARD`].
    pub rank: Rank,
}

impl Proc {
    /// A process name.
    pub fn new(nspace: impl Into<String>, rank: Rank) -> Proc {
        Proc {
            nspace: nspace.into(),
            rank,
        }
    }

    /// The whole namespace (`PMIX_RANK_WILDCARD`).
    pub fn wildcard(nspace: impl Into<String>) -> Proc {
        Proc::new(nspace, RANK_WILDCARD)
    }

    /// Converts into the C struct.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the namespace has a NUL byte or exceeds 255 bytes.
    pub(crate) fn to_raw(&self) -> Result<sys::pmix_proc_t> {
        let mut raw = sys::pmix_proc_t::default();
        copy_cstr(&mut raw.nspace, &self.nspace, "namespace")?;
        raw.rank = self.rank;
        Ok(raw)
    }

    /// Copies a C proc.
    ///
    /// # Safety
    /// `raw` must point to a valid `pmix_proc_t`.
    pub(crate) unsafe fn from_raw(raw: *const sys::pmix_proc_t) -> Proc {
        // SAFETY: the caller guarantees a valid proc; nspace is NUL-terminated within 256.
        let raw = unsafe { &*raw };
        Proc {
            nspace: fixed_str(&raw.nspace),
            rank: raw.rank,
        }
    }
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            RANK_WILDCARD => write!(f, "{}:*", self.nspace),
            r => write!(f, "{}:{}", self.nspace, r),
        }
    }
}

/// `PMIX_PROC_STATE_RUNNING`, for [`ProcInfo::state`].
pub const PROC_STATE_RUNNING: u8 = sys::PMIX_PROC_STATE_RUNNING as u8;
/// `PMIX_PROC_STATE_TERMINATED`, for [`ProcInfo::state`].
pub const PROC_STATE_TERMINATED: u8 = sys::PMIX_PROC_STATE_TERMINATED as u8;

/// `PMIX_LINK_UP`.
pub const LINK_UP: u8 = sys::PMIX_LINK_UP as u8;
/// `PMIX_LINK_DOWN`.
pub const LINK_DOWN: u8 = sys::PMIX_LINK_DOWN as u8;
/// `PMIX_LINK_STATE_UNKNOWN`.
pub const LINK_STATE_UNKNOWN: u8 = sys::PMIX_LINK_STATE_UNKNOWN as u8;

/// `PMIX_DEVTYPE_NETWORK`, for [`DeviceDistance::device_type`].
pub const DEVTYPE_NETWORK: u64 = sys::PMIX_DEVTYPE_NETWORK as u64;
/// `PMIX_DEVTYPE_OPENFABRICS`, for [`DeviceDistance::device_type`].
pub const DEVTYPE_OPENFABRICS: u64 = sys::PMIX_DEVTYPE_OPENFABRICS as u64;

/// One entry of `PMIX_DEVICE_DISTANCES` (`pmix_device_distance_t`): how far a device is from
/// a process's CPUs. Smaller is nearer; consumers compare entries with each other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceDistance {
    /// A unique id of the device (`net://...`, `fab://...`).
    pub uuid: String,
    /// The OS name (`eth0`, `mlx5_0`).
    pub osname: String,
    /// `pmix_device_type_t` ([`DEVTYPE_NETWORK`], [`DEVTYPE_OPENFABRICS`], ...).
    pub device_type: u64,
    /// Minimum distance.
    pub mindist: u16,
    /// Maximum distance.
    pub maxdist: u16,
}

/// One row of a process table (`pmix_proc_info_t`), as tools see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcInfo {
    /// The process name.
    pub proc: Proc,
    /// The host it runs on.
    pub hostname: String,
    /// The executable.
    pub executable: String,
    /// Its OS process id.
    pub pid: i32,
    /// Its exit code, once it exited.
    pub exit_code: i32,
    /// `pmix_proc_state_t` (`PMIX_PROC_STATE_RUNNING`, ...); [`ProcInfo::state_name`]
    /// says it in words.
    pub state: u8,
}

impl ProcInfo {
    /// The process state in words ([`proc_state_name`]).
    pub fn state_name(&self) -> &'static str {
        proc_state_name(self.state)
    }
}

/// A `pmix_proc_state_t` in words, after the PMIx constant's name: `running`,
/// `terminated`, `killed-by-cmd`, `terminated-without-finalize` (`TERM_WO_SYNC`), ...;
/// `unknown` for a code this PMIx does not define. (`PMIx_Proc_state_string` says
/// `PROC EXECUTING` for running.)
pub fn proc_state_name(state: u8) -> &'static str {
    match u32::from(state) {
        sys::PMIX_PROC_STATE_UNDEF => "undefined",
        sys::PMIX_PROC_STATE_PREPPED => "prepped",
        sys::PMIX_PROC_STATE_LAUNCH_UNDERWAY => "launch-underway",
        sys::PMIX_PROC_STATE_RESTART => "restart",
        sys::PMIX_PROC_STATE_TERMINATE => "terminate",
        sys::PMIX_PROC_STATE_RUNNING => "running",
        sys::PMIX_PROC_STATE_CONNECTED => "connected",
        sys::PMIX_PROC_STATE_UNTERMINATED => "unterminated",
        sys::PMIX_PROC_STATE_TERMINATED => "terminated",
        sys::PMIX_PROC_STATE_ERROR => "error",
        sys::PMIX_PROC_STATE_KILLED_BY_CMD => "killed-by-cmd",
        sys::PMIX_PROC_STATE_ABORTED => "aborted",
        sys::PMIX_PROC_STATE_FAILED_TO_START => "failed-to-start",
        sys::PMIX_PROC_STATE_ABORTED_BY_SIG => "aborted-by-signal",
        sys::PMIX_PROC_STATE_TERM_WO_SYNC => "terminated-without-finalize",
        sys::PMIX_PROC_STATE_COMM_FAILED => "comm-failed",
        sys::PMIX_PROC_STATE_SENSOR_BOUND_EXCEEDED => "sensor-bound-exceeded",
        sys::PMIX_PROC_STATE_CALLED_ABORT => "called-abort",
        sys::PMIX_PROC_STATE_HEARTBEAT_FAILED => "heartbeat-failed",
        sys::PMIX_PROC_STATE_MIGRATING => "migrating",
        sys::PMIX_PROC_STATE_CANNOT_RESTART => "cannot-restart",
        sys::PMIX_PROC_STATE_TERM_NON_ZERO => "terminated-non-zero",
        sys::PMIX_PROC_STATE_FAILED_TO_LAUNCH => "failed-to-launch",
        _ => "unknown",
    }
}

/// A typed PMIx value. The variant names follow the PMIx data types (`PMIX_UINT32`, ...).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `PMIX_BOOL`
    Bool(bool),
    /// `PMIX_BYTE`
    Byte(u8),
    /// `PMIX_STRING`
    String(String),
    /// `PMIX_SIZE`
    Size(usize),
    /// `PMIX_PID`
    Pid(i32),
    /// `PMIX_INT`
    Int(i32),
    /// `PMIX_INT8`
    Int8(i8),
    /// `PMIX_INT16`
    Int16(i16),
    /// `PMIX_INT32`
    Int32(i32),
    /// `PMIX_INT64`
    Int64(i64),
    /// `PMIX_UINT`
    Uint(u32),
    /// `PMIX_UINT8`
    Uint8(u8),
    /// `PMIX_UINT16`
    Uint16(u16),
    /// `PMIX_UINT32`
    Uint32(u32),
    /// `PMIX_UINT64`
    Uint64(u64),
    /// `PMIX_FLOAT`
    Float(f32),
    /// `PMIX_DOUBLE`
    Double(f64),
    /// `PMIX_TIME` (seconds since the epoch)
    Time(i64),
    /// `PMIX_STATUS`
    Status(Status),
    /// `PMIX_PROC_RANK`
    Rank(Rank),
    /// `PMIX_PROC`
    Proc(Proc),
    /// `PMIX_BYTE_OBJECT`
    Bytes(Vec<u8>),
    /// `PMIX_PERSIST`
    Persistence(u8),
    /// `PMIX_SCOPE`
    Scope(u8),
    /// `PMIX_DATA_RANGE`
    Range(u8),
    /// `PMIX_PROC_STATE`
    ProcState(u8),
    /// `PMIX_LINK_STATE` ([`LINK_UP`], [`LINK_DOWN`], [`LINK_STATE_UNKNOWN`])
    LinkState(u8),
    /// `PMIX_POINTER`: an address only meaningful inside this process.
    Pointer(usize),
    /// `PMIX_DATA_ARRAY` of `PMIX_INFO`
    Infos(Vec<Info>),
    /// `PMIX_DATA_ARRAY` of `PMIX_PROC`
    Procs(Vec<Proc>),
    /// `PMIX_DATA_ARRAY` of `PMIX_STRING`
    Strings(Vec<String>),
    /// `PMIX_DATA_ARRAY` of `PMIX_PROC_INFO`
    ProcInfos(Vec<ProcInfo>),
    /// `PMIX_DATA_ARRAY` of `PMIX_DEVICE_DIST`
    DeviceDistances(Vec<DeviceDistance>),
    /// `PMIX_DATA_ARRAY` of `PMIX_UINT16` (a fabric's cost matrix, row by row)
    Uint16s(Vec<u16>),
    /// A type this layer does not convert, with its PMIx type code. Reading yields it;
    /// passing it to PMIx is an [`Error::InvalidArgument`].
    Other(u16),
}

impl Value {
    /// The value as an unsigned integer, whatever integer type the host chose (hosts differ:
    /// one registers `PMIX_LOCAL_RANK` as `UINT16`, another as `UINT32`). `None` for
    /// non-integers and negative numbers.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Byte(v) | Value::Uint8(v) => Some(v.into()),
            Value::Uint16(v) => Some(v.into()),
            Value::Uint(v) | Value::Uint32(v) | Value::Rank(v) => Some(v.into()),
            Value::Uint64(v) => Some(v),
            Value::Size(v) => u64::try_from(v).ok(),
            Value::Int8(v) => u64::try_from(v).ok(),
            Value::Int16(v) => u64::try_from(v).ok(),
            Value::Int(v) | Value::Int32(v) | Value::Pid(v) => u64::try_from(v).ok(),
            Value::Int64(v) | Value::Time(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string slice, for `String` values.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool, for `Bool` values.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as bytes, for `Bytes` and `String` values.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::String(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// A short name of the variant, for error messages.
    pub fn type_name(&self) -> String {
        match self {
            Value::Other(code) => format!("PMIx type {code}"),
            other => {
                let dbg = format!("{other:?}");
                dbg.split('(').next().unwrap_or("?").to_string()
            }
        }
    }

    /// Writes this value into `dst`, allocating with `malloc` what PMIx will free.
    ///
    /// # Safety
    /// `dst` must point to a writable `pmix_value_t` that holds no allocation.
    pub(crate) unsafe fn load(&self, dst: *mut sys::pmix_value_t) -> Result<()> {
        // SAFETY: the caller guarantees `dst` is valid and empty.
        let dst = unsafe { &mut *dst };
        let ty = match self.load_scalar(&mut dst.data) {
            Some(ty) => ty,
            None => self.load_owned(&mut dst.data)?,
        };
        dst.type_ = ty as u16;
        Ok(())
    }

    /// Writes a value that owns no memory into `d` and returns its type tag; `None` for a
    /// value that owns some ([`Value::load_owned`]).
    fn load_scalar(&self, d: &mut sys::pmix_value__bindgen_ty_1) -> Option<u32> {
        /// Sets union field `$field` (writing a `Copy` field of a union is safe).
        macro_rules! put {
            ($field:ident = $v:expr, $ty:expr) => {{
                d.$field = $v;
                $ty
            }};
        }
        Some(match *self {
            Value::Bool(v) => put!(flag = v, sys::PMIX_BOOL),
            Value::Byte(v) => put!(byte = v, sys::PMIX_BYTE),
            Value::Size(v) => put!(size = v, sys::PMIX_SIZE),
            Value::Pid(v) => put!(pid = v, sys::PMIX_PID),
            Value::Int(v) => put!(integer = v, sys::PMIX_INT),
            Value::Int8(v) => put!(int8 = v, sys::PMIX_INT8),
            Value::Int16(v) => put!(int16 = v, sys::PMIX_INT16),
            Value::Int32(v) => put!(int32 = v, sys::PMIX_INT32),
            Value::Int64(v) => put!(int64 = v, sys::PMIX_INT64),
            Value::Uint(v) => put!(uint = v, sys::PMIX_UINT),
            Value::Uint8(v) => put!(uint8 = v, sys::PMIX_UINT8),
            Value::Uint16(v) => put!(uint16 = v, sys::PMIX_UINT16),
            Value::Uint32(v) => put!(uint32 = v, sys::PMIX_UINT32),
            Value::Uint64(v) => put!(uint64 = v, sys::PMIX_UINT64),
            Value::Float(v) => put!(fval = v, sys::PMIX_FLOAT),
            Value::Double(v) => put!(dval = v, sys::PMIX_DOUBLE),
            Value::Time(v) => put!(time = v, sys::PMIX_TIME),
            Value::Status(v) => put!(status = v.0, sys::PMIX_STATUS),
            Value::Rank(v) => put!(rank = v, sys::PMIX_PROC_RANK),
            Value::Persistence(v) => put!(persist = v, sys::PMIX_PERSIST),
            Value::Scope(v) => put!(scope = v, sys::PMIX_SCOPE),
            Value::Range(v) => put!(range = v, sys::PMIX_DATA_RANGE),
            Value::ProcState(v) => put!(state = v, sys::PMIX_PROC_STATE),
            Value::LinkState(v) => put!(linkstate = v, sys::PMIX_LINK_STATE),
            Value::Pointer(v) => put!(ptr = v as *mut c_void, sys::PMIX_POINTER),
            _ => return None,
        })
    }

    /// Writes a value that owns memory (strings, a proc, bytes, arrays) into `d`,
    /// allocated with `malloc` for PMIx to free, and returns its type tag.
    fn load_owned(&self, d: &mut sys::pmix_value__bindgen_ty_1) -> Result<u32> {
        Ok(match self {
            Value::String(s) => {
                d.string = strdup(s, "string value")?;
                sys::PMIX_STRING
            }
            Value::Proc(p) => {
                let raw = p.to_raw()?;
                // SAFETY: malloc of a POD struct, freed by PMIx_Value_destruct.
                d.proc_ = unsafe { alloc_copy(&raw) };
                sys::PMIX_PROC
            }
            Value::Bytes(b) => {
                d.bo = bytes_to_raw(b);
                sys::PMIX_BYTE_OBJECT
            }
            Value::Infos(items) => {
                d.darray = data_array(items, sys::PMIX_INFO, |slot: *mut sys::pmix_info_t, i| {
                    // SAFETY: slot is a zeroed element of a fresh info array.
                    unsafe { i.load(slot) }
                })?;
                sys::PMIX_DATA_ARRAY
            }
            Value::Procs(items) => {
                d.darray = data_array(items, sys::PMIX_PROC, |slot: *mut sys::pmix_proc_t, p| {
                    // SAFETY: slot is an element of a fresh proc array.
                    unsafe { *slot = p.to_raw()? };
                    Ok(())
                })?;
                sys::PMIX_DATA_ARRAY
            }
            Value::Strings(items) => {
                d.darray = data_array(items, sys::PMIX_STRING, |slot: *mut *mut c_char, s| {
                    // SAFETY: slot is an element of a fresh char* array.
                    unsafe { *slot = strdup(s, "string array element")? };
                    Ok(())
                })?;
                sys::PMIX_DATA_ARRAY
            }
            Value::ProcInfos(items) => {
                d.darray = data_array(items, sys::PMIX_PROC_INFO, load_proc_info)?;
                sys::PMIX_DATA_ARRAY
            }
            Value::DeviceDistances(items) => {
                d.darray = data_array(items, sys::PMIX_DEVICE_DIST, load_distance)?;
                sys::PMIX_DATA_ARRAY
            }
            Value::Uint16s(items) => {
                d.darray = data_array(items, sys::PMIX_UINT16, |slot: *mut u16, v| {
                    // SAFETY: slot is an element of a fresh uint16_t array.
                    unsafe { *slot = *v };
                    Ok(())
                })?;
                sys::PMIX_DATA_ARRAY
            }
            Value::Other(code) => {
                return Err(Error::InvalidArgument(format!(
                    "cannot pass a value of PMIx type {code} through this layer"
                )));
            }
            scalar => unreachable!("{scalar:?} owns no memory: load_scalar writes it"),
        })
    }

    /// Copies a C value.
    ///
    /// # Safety
    /// `v` must point to a valid, initialised `pmix_value_t`.
    pub(crate) unsafe fn from_raw(v: *const sys::pmix_value_t) -> Value {
        // SAFETY: the caller guarantees validity; each arm reads the union field that the
        // type tag says is active.
        unsafe {
            let v = &*v;
            let d = &v.data;
            match u32::from(v.type_) {
                sys::PMIX_BOOL => Value::Bool(d.flag),
                sys::PMIX_BYTE => Value::Byte(d.byte),
                sys::PMIX_STRING => Value::String(cstr_lossy(d.string)),
                sys::PMIX_SIZE => Value::Size(d.size),
                sys::PMIX_PID => Value::Pid(d.pid),
                sys::PMIX_INT => Value::Int(d.integer),
                sys::PMIX_INT8 => Value::Int8(d.int8),
                sys::PMIX_INT16 => Value::Int16(d.int16),
                sys::PMIX_INT32 => Value::Int32(d.int32),
                sys::PMIX_INT64 => Value::Int64(d.int64),
                sys::PMIX_UINT => Value::Uint(d.uint),
                sys::PMIX_UINT8 => Value::Uint8(d.uint8),
                sys::PMIX_UINT16 => Value::Uint16(d.uint16),
                sys::PMIX_UINT32 => Value::Uint32(d.uint32),
                sys::PMIX_UINT64 => Value::Uint64(d.uint64),
                sys::PMIX_FLOAT => Value::Float(d.fval),
                sys::PMIX_DOUBLE => Value::Double(d.dval),
                sys::PMIX_TIME => Value::Time(d.time),
                sys::PMIX_STATUS => Value::Status(Status(d.status)),
                sys::PMIX_PROC_RANK => Value::Rank(d.rank),
                sys::PMIX_PERSIST => Value::Persistence(d.persist),
                sys::PMIX_SCOPE => Value::Scope(d.scope),
                sys::PMIX_DATA_RANGE => Value::Range(d.range),
                sys::PMIX_PROC_STATE => Value::ProcState(d.state),
                sys::PMIX_LINK_STATE => Value::LinkState(d.linkstate),
                sys::PMIX_POINTER => Value::Pointer(d.ptr as usize),
                sys::PMIX_PROC if !d.proc_.is_null() => Value::Proc(Proc::from_raw(d.proc_)),
                sys::PMIX_BYTE_OBJECT => Value::Bytes(bytes_from_raw(&d.bo)),
                sys::PMIX_DATA_ARRAY if !d.darray.is_null() => darray_from_raw(&*d.darray),
                other => Value::Other(other as u16),
            }
        }
    }
}

/// Fills a zeroed element of a fresh proc-info array.
fn load_proc_info(slot: *mut sys::pmix_proc_info_t, pi: &ProcInfo) -> Result<()> {
    // SAFETY: `data_array` passes an element of the array it just created.
    let slot = unsafe { &mut *slot };
    slot.proc_ = pi.proc.to_raw()?;
    slot.hostname = strdup(&pi.hostname, "hostname")?;
    slot.executable_name = strdup(&pi.executable, "executable")?;
    slot.pid = pi.pid;
    slot.exit_code = pi.exit_code;
    slot.state = pi.state;
    Ok(())
}

/// Fills a zeroed element of a fresh device-distance array.
fn load_distance(slot: *mut sys::pmix_device_distance_t, dd: &DeviceDistance) -> Result<()> {
    // SAFETY: `data_array` passes an element of the array it just created.
    let slot = unsafe { &mut *slot };
    slot.uuid = strdup(&dd.uuid, "device uuid")?;
    slot.osname = strdup(&dd.osname, "device name")?;
    slot.type_ = dd.device_type;
    slot.mindist = dd.mindist;
    slot.maxdist = dd.maxdist;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use info::InfoArray;

    #[test]
    fn process_states_have_names() {
        assert_eq!(proc_state_name(PROC_STATE_RUNNING), "running");
        assert_eq!(proc_state_name(PROC_STATE_TERMINATED), "terminated");
        assert_eq!(proc_state_name(250), "unknown");
    }

    fn roundtrip(v: Value) -> Value {
        let mut raw = sys::pmix_value_t::default();
        // SAFETY: raw is a zeroed value; destructed after reading.
        unsafe {
            v.load(&mut raw).expect("load");
            let back = Value::from_raw(&raw);
            sys::PMIx_Value_destruct(&mut raw);
            back
        }
    }

    #[test]
    fn scalars_and_strings_roundtrip() {
        for v in [
            Value::Bool(true),
            Value::Uint32(7),
            Value::Uint16(3),
            Value::Int64(-5),
            Value::Double(2.5),
            Value::String("hello".into()),
            Value::Bytes(vec![1, 2, 3]),
            Value::Status(Status::PROC_ABORTED),
            Value::Proc(Proc::new("ns", 4)),
            Value::Rank(RANK_WILDCARD),
            Value::LinkState(LINK_UP),
        ] {
            assert_eq!(roundtrip(v.clone()), v);
        }
    }

    #[test]
    fn arrays_roundtrip() {
        let nested = Value::Infos(vec![
            Info::new("a", Value::Uint32(1)),
            Info::new("b", Value::Strings(vec!["x".into(), "y".into()])),
            Info::new(
                "c",
                Value::Procs(vec![Proc::new("n", 0), Proc::new("n", 1)]),
            ),
        ]);
        assert_eq!(roundtrip(nested.clone()), nested);
        let table = Value::ProcInfos(vec![ProcInfo {
            proc: Proc::new("job", 2),
            hostname: "h".into(),
            executable: "/bin/x".into(),
            pid: 42,
            exit_code: 0,
            state: 3,
        }]);
        assert_eq!(roundtrip(table.clone()), table);
        let dist = Value::DeviceDistances(vec![DeviceDistance {
            uuid: "net://eth0".into(),
            osname: "eth0".into(),
            device_type: DEVTYPE_NETWORK,
            mindist: 1,
            maxdist: 1,
        }]);
        assert_eq!(roundtrip(dist.clone()), dist);
        let costs = Value::Uint16s(vec![0, 2, 4, 2, 0, u16::MAX]);
        assert_eq!(roundtrip(costs.clone()), costs);
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let long = "k".repeat(600);
        let mut raw = sys::pmix_info_t::default();
        // SAFETY: zeroed info; the load fails before allocating.
        let err = unsafe { Info::new(long, Value::Bool(true)).load(&mut raw) };
        assert!(matches!(err, Err(Error::InvalidArgument(m)) if m.contains("at most 511")));
        let err = Proc::new("a\0b", 0).to_raw();
        assert!(matches!(err, Err(Error::InvalidArgument(m)) if m.contains("NUL")));
        assert!(InfoArray::new(&[Info::new("x", Value::Other(99))]).is_err());
    }

    #[test]
    fn integer_widening() {
        assert_eq!(Value::Uint16(9).as_u64(), Some(9));
        assert_eq!(Value::Int(-1).as_u64(), None);
        assert_eq!(Value::String("x".into()).as_u64(), None);
        assert_eq!(Value::Uint32(1).type_name(), "Uint32");
    }
}
