//! PMIx attribute names as `&str`, taken from the generated bindings (so they always match
//! the installed headers). Only the keys this project uses are listed; any other key can be
//! passed as a string.

use pmix_sys as sys;

/// Turns a bindgen byte-string constant (`b"pmix.job.size\0"`) into a `&str`.
const fn key(b: &'static [u8]) -> &'static str {
    let (text, _nul) = b.split_at(b.len() - 1);
    match std::str::from_utf8(text) {
        Ok(s) => s,
        Err(_) => panic!("PMIx key is not UTF-8"),
    }
}

/// `PMIX_JOB_SIZE`
pub const JOB_SIZE: &str = key(sys::PMIX_JOB_SIZE);
/// `PMIX_UNIV_SIZE`
pub const UNIV_SIZE: &str = key(sys::PMIX_UNIV_SIZE);
/// `PMIX_MAX_PROCS`
pub const MAX_PROCS: &str = key(sys::PMIX_MAX_PROCS);
/// `PMIX_LOCAL_SIZE`
pub const LOCAL_SIZE: &str = key(sys::PMIX_LOCAL_SIZE);
/// `PMIX_LOCAL_PEERS`
pub const LOCAL_PEERS: &str = key(sys::PMIX_LOCAL_PEERS);
/// `PMIX_NODE_MAP`
pub const NODE_MAP: &str = key(sys::PMIX_NODE_MAP);
/// `PMIX_PROC_MAP`
pub const PROC_MAP: &str = key(sys::PMIX_PROC_MAP);
/// `PMIX_JOBID`
pub const JOBID: &str = key(sys::PMIX_JOBID);
/// `PMIX_APPNUM`
pub const APPNUM: &str = key(sys::PMIX_APPNUM);
/// `PMIX_RANK`
pub const RANK: &str = key(sys::PMIX_RANK);
/// `PMIX_LOCAL_RANK`
pub const LOCAL_RANK: &str = key(sys::PMIX_LOCAL_RANK);
/// `PMIX_NODE_RANK`
pub const NODE_RANK: &str = key(sys::PMIX_NODE_RANK);
/// `PMIX_HOSTNAME`
pub const HOSTNAME: &str = key(sys::PMIX_HOSTNAME);
/// `PMIX_LOCALITY_STRING`
pub const LOCALITY_STRING: &str = key(sys::PMIX_LOCALITY_STRING);
/// `PMIX_PROC_DATA`
pub const PROC_DATA: &str = key(sys::PMIX_PROC_DATA);
/// `PMIX_NSPACE`
pub const NSPACE: &str = key(sys::PMIX_NSPACE);
/// `PMIX_TIMEOUT`
pub const TIMEOUT: &str = key(sys::PMIX_TIMEOUT);
/// `PMIX_IMMEDIATE`
pub const IMMEDIATE: &str = key(sys::PMIX_IMMEDIATE);
/// `PMIX_COLLECT_DATA`
pub const COLLECT_DATA: &str = key(sys::PMIX_COLLECT_DATA);
/// `PMIX_WAIT`
pub const WAIT: &str = key(sys::PMIX_WAIT);
/// `PMIX_RANGE`
pub const RANGE: &str = key(sys::PMIX_RANGE);
/// `PMIX_PERSISTENCE`
pub const PERSISTENCE: &str = key(sys::PMIX_PERSISTENCE);
/// `PMIX_USERID`
pub const USERID: &str = key(sys::PMIX_USERID);
/// `PMIX_LOG_STDERR`: a `PMIx_Log` channel, the string to write to stderr.
pub const LOG_STDERR: &str = key(sys::PMIX_LOG_STDERR);
/// `PMIX_LOG_STDOUT`: a `PMIx_Log` channel, the string to write to stdout.
pub const LOG_STDOUT: &str = key(sys::PMIX_LOG_STDOUT);
/// `PMIX_LOG_SYSLOG`: a `PMIx_Log` channel, the string for the syslog.
pub const LOG_SYSLOG: &str = key(sys::PMIX_LOG_SYSLOG);
/// `PMIX_LOG_LOCAL_SYSLOG`: a `PMIx_Log` channel, the string for the local syslog.
pub const LOG_LOCAL_SYSLOG: &str = key(sys::PMIX_LOG_LOCAL_SYSLOG);
/// `PMIX_LOG_SYSLOG_PRI`: the syslog priority of a `PMIx_Log` request (default `LOG_ERR`).
pub const LOG_SYSLOG_PRI: &str = key(sys::PMIX_LOG_SYSLOG_PRI);
/// `PMIX_LOG_SOURCE`: the process a `PMIx_Log` request speaks for.
pub const LOG_SOURCE: &str = key(sys::PMIX_LOG_SOURCE);
/// `PMIX_LOG_TIMESTAMP`: the time (`time_t`) a `PMIx_Log` request carries.
pub const LOG_TIMESTAMP: &str = key(sys::PMIX_LOG_TIMESTAMP);
/// `PMIX_LOG_GENERATE_TIMESTAMP`: stamp a `PMIx_Log` request with the time it arrives.
pub const LOG_GENERATE_TIMESTAMP: &str = key(sys::PMIX_LOG_GENERATE_TIMESTAMP);
/// `PMIX_LOG_ONCE`: log on the first channel that can, only.
pub const LOG_ONCE: &str = key(sys::PMIX_LOG_ONCE);

/// `PMIX_GRPID`
pub const GRPID: &str = key(sys::PMIX_GRPID);
/// `PMIX_CRED_TYPE`
pub const CRED_TYPE: &str = key(sys::PMIX_CRED_TYPE);
/// `PMIX_EVENT_RETURN_OBJECT`
pub const EVENT_RETURN_OBJECT: &str = key(sys::PMIX_EVENT_RETURN_OBJECT);
/// `PMIX_EVENT_AFFECTED_PROC`
pub const EVENT_AFFECTED_PROC: &str = key(sys::PMIX_EVENT_AFFECTED_PROC);
/// `PMIX_EVENT_AFFECTED_PROCS`
pub const EVENT_AFFECTED_PROCS: &str = key(sys::PMIX_EVENT_AFFECTED_PROCS);
/// `PMIX_EVENT_TEXT_MESSAGE`
pub const EVENT_TEXT_MESSAGE: &str = key(sys::PMIX_EVENT_TEXT_MESSAGE);
/// `PMIX_EVENT_NON_DEFAULT`
pub const EVENT_NON_DEFAULT: &str = key(sys::PMIX_EVENT_NON_DEFAULT);
/// `PMIX_EXIT_CODE`
pub const EXIT_CODE: &str = key(sys::PMIX_EXIT_CODE);
/// `PMIX_SERVER_TMPDIR`
pub const SERVER_TMPDIR: &str = key(sys::PMIX_SERVER_TMPDIR);
/// `PMIX_SYSTEM_TMPDIR`
pub const SYSTEM_TMPDIR: &str = key(sys::PMIX_SYSTEM_TMPDIR);
/// `PMIX_SERVER_NSPACE`
pub const SERVER_NSPACE: &str = key(sys::PMIX_SERVER_NSPACE);
/// `PMIX_SERVER_RANK`
pub const SERVER_RANK: &str = key(sys::PMIX_SERVER_RANK);
/// `PMIX_SERVER_TOOL_SUPPORT`
pub const SERVER_TOOL_SUPPORT: &str = key(sys::PMIX_SERVER_TOOL_SUPPORT);
/// `PMIX_SERVER_SYSTEM_SUPPORT`
pub const SERVER_SYSTEM_SUPPORT: &str = key(sys::PMIX_SERVER_SYSTEM_SUPPORT);
/// `PMIX_SERVER_PIDINFO`
pub const SERVER_PIDINFO: &str = key(sys::PMIX_SERVER_PIDINFO);
/// `PMIX_SERVER_URI`
pub const SERVER_URI: &str = key(sys::PMIX_SERVER_URI);
/// `PMIX_CONNECT_TO_SYSTEM`
pub const CONNECT_TO_SYSTEM: &str = key(sys::PMIX_CONNECT_TO_SYSTEM);
/// `PMIX_CONNECT_MAX_RETRIES`
pub const CONNECT_MAX_RETRIES: &str = key(sys::PMIX_CONNECT_MAX_RETRIES);
/// `PMIX_TOOL_NSPACE`
pub const TOOL_NSPACE: &str = key(sys::PMIX_TOOL_NSPACE);
/// `PMIX_TOOL_RANK`
pub const TOOL_RANK: &str = key(sys::PMIX_TOOL_RANK);
/// `PMIX_TOOL_DO_NOT_CONNECT`
pub const TOOL_DO_NOT_CONNECT: &str = key(sys::PMIX_TOOL_DO_NOT_CONNECT);
/// `PMIX_QUERY_NAMESPACES`
pub const QUERY_NAMESPACES: &str = key(sys::PMIX_QUERY_NAMESPACES);
/// `PMIX_QUERY_NAMESPACE_INFO`
pub const QUERY_NAMESPACE_INFO: &str = key(sys::PMIX_QUERY_NAMESPACE_INFO);
/// `PMIX_QUERY_PROC_TABLE`
pub const QUERY_PROC_TABLE: &str = key(sys::PMIX_QUERY_PROC_TABLE);
/// `PMIX_QUERY_LOCAL_PROC_TABLE`
pub const QUERY_LOCAL_PROC_TABLE: &str = key(sys::PMIX_QUERY_LOCAL_PROC_TABLE);
/// `PMIX_QUERY_NUM_PSETS`
pub const QUERY_NUM_PSETS: &str = key(sys::PMIX_QUERY_NUM_PSETS);
/// `PMIX_QUERY_PSET_NAMES`
pub const QUERY_PSET_NAMES: &str = key(sys::PMIX_QUERY_PSET_NAMES);
/// `PMIX_QUERY_SPAWN_SUPPORT`
pub const QUERY_SPAWN_SUPPORT: &str = key(sys::PMIX_QUERY_SPAWN_SUPPORT);
/// `PMIX_DEBUG_STOP_IN_INIT`: the ranks wait in `PMIx_Init` until a tool raises
/// `PMIX_DEBUGGER_RELEASE`.
pub const DEBUG_STOP_IN_INIT: &str = key(sys::PMIX_DEBUG_STOP_IN_INIT);
/// `PMIX_QUERY_DEBUG_SUPPORT`
pub const QUERY_DEBUG_SUPPORT: &str = key(sys::PMIX_QUERY_DEBUG_SUPPORT);
/// `PMIX_QUERY_JOB_STATUS`
pub const QUERY_JOB_STATUS: &str = key(sys::PMIX_QUERY_JOB_STATUS);
/// `PMIX_QUERY_SUPPORTED_KEYS`
pub const QUERY_SUPPORTED_KEYS: &str = key(sys::PMIX_QUERY_SUPPORTED_KEYS);
/// `PMIX_CMD_LINE`
pub const CMD_LINE: &str = key(sys::PMIX_CMD_LINE);
/// `PMIX_JOB_CTRL_KILL`: kill the targets.
pub const JOB_CTRL_KILL: &str = key(sys::PMIX_JOB_CTRL_KILL);
/// `PMIX_JOB_CTRL_TERMINATE`: terminate the targets (SIGTERM, then SIGKILL).
pub const JOB_CTRL_TERMINATE: &str = key(sys::PMIX_JOB_CTRL_TERMINATE);
/// `PMIX_JOB_CTRL_SIGNAL`: send the targets this signal.
pub const JOB_CTRL_SIGNAL: &str = key(sys::PMIX_JOB_CTRL_SIGNAL);
/// `PMIX_JOB_CTRL_PREEMPTIBLE`: the requestor may be preempted.
pub const JOB_CTRL_PREEMPTIBLE: &str = key(sys::PMIX_JOB_CTRL_PREEMPTIBLE);
/// `PMIX_JOB_CTRL_CHECKPOINT`: the event the requestor wants for a checkpoint.
pub const JOB_CTRL_CHECKPOINT: &str = key(sys::PMIX_JOB_CTRL_CHECKPOINT);
/// `PMIX_GROUP_ASSIGN_CONTEXT_ID`: a group construct asks for a unique context id.
pub const GROUP_ASSIGN_CONTEXT_ID: &str = key(sys::PMIX_GROUP_ASSIGN_CONTEXT_ID);
/// `PMIX_GROUP_CONTEXT_ID`: the context id assigned to a group.
pub const GROUP_CONTEXT_ID: &str = key(sys::PMIX_GROUP_CONTEXT_ID);
/// `PMIX_GROUP_ID`: a group's name.
pub const GROUP_ID: &str = key(sys::PMIX_GROUP_ID);
/// `PMIX_QUERY_NUM_GROUPS`
pub const QUERY_NUM_GROUPS: &str = key(sys::PMIX_QUERY_NUM_GROUPS);
/// `PMIX_NODE_LIST`
pub const NODE_LIST: &str = key(sys::PMIX_NODE_LIST);
/// `PMIX_PROCID`
pub const PROCID: &str = key(sys::PMIX_PROCID);
/// `PMIX_NUM_NODES`
pub const NUM_NODES: &str = key(sys::PMIX_NUM_NODES);
/// `PMIX_NODEID`
pub const NODEID: &str = key(sys::PMIX_NODEID);
/// `PMIX_LOCAL_CPUSETS`
pub const LOCAL_CPUSETS: &str = key(sys::PMIX_LOCAL_CPUSETS);
/// `PMIX_FABRIC_DEVICES`
pub const FABRIC_DEVICES: &str = key(sys::PMIX_FABRIC_DEVICES);
/// `PMIX_FABRIC_DEVICE`
pub const FABRIC_DEVICE: &str = key(sys::PMIX_FABRIC_DEVICE);
/// `PMIX_FABRIC_DEVICE_NAME`
pub const FABRIC_DEVICE_NAME: &str = key(sys::PMIX_FABRIC_DEVICE_NAME);
/// `PMIX_FABRIC_DEVICE_INDEX`
pub const FABRIC_DEVICE_INDEX: &str = key(sys::PMIX_FABRIC_DEVICE_INDEX);
/// `PMIX_FABRIC_DEVICE_VENDOR`
pub const FABRIC_DEVICE_VENDOR: &str = key(sys::PMIX_FABRIC_DEVICE_VENDOR);
/// `PMIX_FABRIC_DEVICE_VENDORID`
pub const FABRIC_DEVICE_VENDORID: &str = key(sys::PMIX_FABRIC_DEVICE_VENDORID);
/// `PMIX_FABRIC_DEVICE_BUS_TYPE`
pub const FABRIC_DEVICE_BUS_TYPE: &str = key(sys::PMIX_FABRIC_DEVICE_BUS_TYPE);
/// `PMIX_FABRIC_DEVICE_DRIVER`
pub const FABRIC_DEVICE_DRIVER: &str = key(sys::PMIX_FABRIC_DEVICE_DRIVER);
/// `PMIX_FABRIC_DEVICE_ADDRESS`
pub const FABRIC_DEVICE_ADDRESS: &str = key(sys::PMIX_FABRIC_DEVICE_ADDRESS);
/// `PMIX_FABRIC_DEVICE_MTU`
pub const FABRIC_DEVICE_MTU: &str = key(sys::PMIX_FABRIC_DEVICE_MTU);
/// `PMIX_FABRIC_DEVICE_SPEED`
pub const FABRIC_DEVICE_SPEED: &str = key(sys::PMIX_FABRIC_DEVICE_SPEED);
/// `PMIX_FABRIC_DEVICE_STATE`
pub const FABRIC_DEVICE_STATE: &str = key(sys::PMIX_FABRIC_DEVICE_STATE);
/// `PMIX_FABRIC_DEVICE_TYPE`
pub const FABRIC_DEVICE_TYPE: &str = key(sys::PMIX_FABRIC_DEVICE_TYPE);
/// `PMIX_FABRIC_DEVICE_PCI_DEVID`
pub const FABRIC_DEVICE_PCI_DEVID: &str = key(sys::PMIX_FABRIC_DEVICE_PCI_DEVID);
/// `PMIX_FABRIC_NUM_DEVICES`
pub const FABRIC_NUM_DEVICES: &str = key(sys::PMIX_FABRIC_NUM_DEVICES);
/// `PMIX_FABRIC_VENDOR`
pub const FABRIC_VENDOR: &str = key(sys::PMIX_FABRIC_VENDOR);
/// `PMIX_FABRIC_IDENTIFIER`
pub const FABRIC_IDENTIFIER: &str = key(sys::PMIX_FABRIC_IDENTIFIER);
/// `PMIX_FABRIC_INDEX`
pub const FABRIC_INDEX: &str = key(sys::PMIX_FABRIC_INDEX);
/// `PMIX_FABRIC_PLANE`
pub const FABRIC_PLANE: &str = key(sys::PMIX_FABRIC_PLANE);
/// `PMIX_FABRIC_COST_MATRIX`
pub const FABRIC_COST_MATRIX: &str = key(sys::PMIX_FABRIC_COST_MATRIX);
/// `PMIX_FABRIC_GROUPS`
pub const FABRIC_GROUPS: &str = key(sys::PMIX_FABRIC_GROUPS);
/// `PMIX_FABRIC_SWITCH`
pub const FABRIC_SWITCH: &str = key(sys::PMIX_FABRIC_SWITCH);
/// `PMIX_DEVICE_DISTANCES`
pub const DEVICE_DISTANCES: &str = key(sys::PMIX_DEVICE_DISTANCES);

/// `PMIX_PARENT_ID`: job-level key of a spawned job, the process that spawned it.
pub const PARENT_ID: &str = key(sys::PMIX_PARENT_ID);
/// `PMIX_SPAWNED`: job-level key, true when the job was started by `PMIx_Spawn`.
pub const SPAWNED: &str = key(sys::PMIX_SPAWNED);
/// `PMIX_APP_RANK`: a process's rank within its application.
pub const APP_RANK: &str = key(sys::PMIX_APP_RANK);
/// `PMIX_WDIR`: the working directory of a spawned application.
pub const WDIR: &str = key(sys::PMIX_WDIR);
/// `PMIX_NOTIFY_COMPLETION`: a spawn directive, tell the requestor when the job ends.
pub const NOTIFY_COMPLETION: &str = key(sys::PMIX_NOTIFY_COMPLETION);
/// `PMIX_JOB_TERM_STATUS`: in a job-end event, the job's status.
pub const JOB_TERM_STATUS: &str = key(sys::PMIX_JOB_TERM_STATUS);
/// `PMIX_FWD_STDOUT`: a spawn directive, forward the job's stdout to the requestor.
pub const FWD_STDOUT: &str = key(sys::PMIX_FWD_STDOUT);
/// `PMIX_FWD_STDERR`: a spawn directive, forward the job's stderr to the requestor.
pub const FWD_STDERR: &str = key(sys::PMIX_FWD_STDERR);
/// `PMIX_IOF_LOCAL_OUTPUT`: whether a server writes the output it forwards to tools on its
/// own stdout/stderr too.
pub const IOF_LOCAL_OUTPUT: &str = key(sys::PMIX_IOF_LOCAL_OUTPUT);
/// `PMIX_IOF_STOP`: an IOF request that ends an earlier pull.
pub const IOF_STOP: &str = key(sys::PMIX_IOF_STOP);
/// `PMIX_EVENT_CUSTOM_RANGE`: the processes an event with a custom range goes to.
pub const EVENT_CUSTOM_RANGE: &str = key(sys::PMIX_EVENT_CUSTOM_RANGE);
