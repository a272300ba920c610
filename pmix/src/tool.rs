//! A PMIx tool: a separate process that attaches to a running PMIx server (a `maestro run`
//! started with `--tool-support`) to ask it questions.

use std::path::PathBuf;
use std::time::Duration;

use pmix_sys as sys;

use crate::error::{Result, check};
use crate::keys;
use crate::query::{Query, query_info};
use crate::runtime;
use crate::sync::infos;
use crate::value::Info;
use crate::value::{Proc, Value};

/// Which server to attach to.
#[derive(Clone, Debug)]
pub enum ToolTarget {
    /// The server process with this pid; its rendezvous file is searched in `tmpdir`
    /// (when given) or the default temporary directory.
    Pid {
        /// The server's process id.
        pid: i32,
        /// The server's tmpdir (`maestro run` prints it with `--tool-support`).
        tmpdir: Option<PathBuf>,
    },
    /// A server URI (`nspace.rank;tcp4://127.0.0.1:PORT`) or `file:PATH` of a rendezvous
    /// file.
    Uri(String),
    /// This node's system server, found through its rendezvous file in `tmpdir` (the
    /// system tmpdir; default `$TMPDIR` or `/tmp`).
    System {
        /// The system tmpdir the server uses.
        tmpdir: Option<PathBuf>,
    },
}

/// A connected tool. Finalises on drop. One per process.
pub struct Tool {
    me: Proc,
}

impl Tool {
    /// Attaches to `target`, retrying the connection `retries` times.
    ///
    /// # Errors
    /// [`crate::Error::Unreachable`] when no server answers (wrong pid, no tool support,
    /// Slurm's stepd); [`crate::Error::AlreadyInitialized`] if PMIx is already in use here.
    #[doc(alias = "PMIx_tool_init")]
    pub fn connect(target: &ToolTarget, retries: u32) -> Result<Tool> {
        runtime::claim("tool")?;
        let result = (|| {
            let mut dirs = match target {
                ToolTarget::Pid { pid, tmpdir } => {
                    let mut d = vec![Info::new(keys::SERVER_PIDINFO, Value::Pid(*pid))];
                    if let Some(t) = tmpdir {
                        d.push(Info::new(
                            keys::SERVER_TMPDIR,
                            Value::String(t.to_string_lossy().into_owned()),
                        ));
                    }
                    d
                }
                ToolTarget::Uri(u) => vec![Info::new(keys::SERVER_URI, Value::String(u.clone()))],
                ToolTarget::System { tmpdir } => {
                    let mut d = vec![Info::new(keys::CONNECT_TO_SYSTEM, Value::Bool(true))];
                    if let Some(t) = tmpdir {
                        d.push(Info::new(
                            keys::SYSTEM_TMPDIR,
                            Value::String(t.to_string_lossy().into_owned()),
                        ));
                    }
                    d
                }
            };
            dirs.push(Info::new(keys::CONNECT_MAX_RETRIES, Value::Uint32(retries)));
            let dirs = infos(&dirs)?;
            let mut raw = sys::pmix_proc_t::default();
            // SAFETY: raw and dirs valid for the call.
            let rc = unsafe { sys::PMIx_tool_init(&mut raw, dirs.as_ptr(), dirs.len()) };
            check("PMIx_tool_init", rc)?;
            // SAFETY: filled by PMIx_tool_init.
            let me = unsafe { Proc::from_raw(&raw) };
            Ok(Tool { me })
        })();
        if result.is_err() {
            runtime::release_failed();
        }
        result
    }

    /// The name the server assigned to this tool.
    pub fn proc(&self) -> &Proc {
        &self.me
    }

    /// Asks the server (`PMIx_Query_info`).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when the server knows none of the keys;
    /// [`crate::Error::Timeout`].
    #[doc(alias = "PMIx_Query_info")]
    pub fn query(&self, queries: &[Query], timeout: Duration) -> Result<Vec<Info>> {
        query_info(queries, timeout)
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        // SAFETY: the tool was initialised by this object.
        let rc = unsafe { sys::PMIx_tool_finalize() };
        if let Err(e) = check("PMIx_tool_finalize", rc) {
            tracing::warn!("{e}");
        }
    }
}
