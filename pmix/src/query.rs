//! `PMIx_Query_info`, shared by clients and tools.

use std::time::Duration;

use pmix_sys as sys;

use crate::error::{Error, Result, from_status};
use crate::ffi::CArgv;
use crate::sync::{Completion, info_cb};
use crate::value::{Info, InfoArray};

/// One query: the keys asked for (`PMIX_QUERY_NAMESPACES`, ...) and qualifiers that narrow
/// them (`PMIX_NSPACE`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    /// The keys asked for.
    pub keys: Vec<String>,
    /// Qualifiers.
    pub qualifiers: Vec<Info>,
}

impl Query {
    /// A query for one key with no qualifiers.
    pub fn key(key: &str) -> Query {
        Query {
            keys: vec![key.to_string()],
            qualifiers: Vec::new(),
        }
    }

    /// Adds a qualifier.
    pub fn qualify(mut self, info: Info) -> Query {
        self.qualifiers.push(info);
        self
    }
}

/// An owned C `pmix_query_t` array, freed with `PMIX_QUERY_FREE`.
struct QueryArray {
    ptr: *mut sys::pmix_query_t,
    len: usize,
}

// SAFETY: owned memory that PMIx only reads.
unsafe impl Send for QueryArray {}

impl Drop for QueryArray {
    fn drop(&mut self) {
        // SAFETY: created by mpmix_query_create with this length; every field was
        // malloc'ed by PMIx's argv helper or handed over by InfoArray::into_raw.
        unsafe { sys::mpmix_query_free(self.ptr, self.len) };
    }
}

fn build(queries: &[Query]) -> Result<QueryArray> {
    // SAFETY: zeroed array of queries (NULL for 0).
    let ptr = unsafe { sys::mpmix_query_create(queries.len()) };
    let arr = QueryArray {
        ptr,
        len: queries.len(),
    };
    for (i, q) in queries.iter().enumerate() {
        // SAFETY: i < len.
        let slot = unsafe { &mut *arr.ptr.add(i) };
        for k in &q.keys {
            let argv = CArgv::new(&[k.as_str()])?;
            // SAFETY: appends a malloc'ed copy of the key to the query's argv.
            let rc = unsafe { sys::mpmix_argv_append(&mut slot.keys, *argv.as_ptr()) };
            crate::error::check("PMIx_Query_info", rc)?;
        }
        let (qp, qn) = InfoArray::new(&q.qualifiers)?.into_raw();
        slot.qualifiers = qp;
        slot.nqual = qn;
    }
    Ok(arr)
}

/// Runs the queries and returns every answer the host gave. Partial answers are returned
/// as long as at least one key was answered.
pub(crate) fn query_info(queries: &[Query], timeout: Duration) -> Result<Vec<Info>> {
    let arr = build(queries)?;
    let done = Completion::<(i32, Vec<Info>)>::new();
    let cbdata = done.lend();
    // SAFETY: the query array is kept alive by the completion until the callback.
    let rc = unsafe { sys::PMIx_Query_info_nb(arr.ptr, arr.len, Some(info_cb), cbdata) };
    done.keep(arr);
    if rc != sys::PMIX_SUCCESS as i32 {
        // SAFETY: no callback will come.
        unsafe { Completion::<(i32, Vec<Info>)>::reclaim(cbdata) };
        return Err(from_status("PMIx_Query_info", rc, None));
    }
    match done.wait(timeout) {
        Some((rc, found)) if rc == 0 || rc == sys::PMIX_ERR_PARTIAL_SUCCESS => Ok(found),
        Some((rc, _)) => Err(from_status("PMIx_Query_info", rc, Some("queried keys"))),
        None => Err(Error::Timeout {
            op: "PMIx_Query_info",
        }),
    }
}
