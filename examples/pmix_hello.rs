//! pmix_hello: the PMIx "hello world" of this project, and a check that a launcher gives a
//! client what it needs. Each rank prints its identity; rank 0 puts a value that every rank
//! reads after a collecting fence; rank 0 publishes a key that the others look up; rank 0
//! obtains a credential that rank 1 validates. Capabilities the host lacks (Slurm has no
//! publish/lookup or credentials) are reported as "not supported", not as failures.
//!
//! Run: `maestro run -n 3 target/debug/examples/pmix_hello`, or under
//! `srun --mpi=pmix -n 3` / `mpirun -np 3`. Exits non-zero if anything that the host does
//! support went wrong.

use std::process::ExitCode;
use std::time::Duration;

use pmix::{Client, Error, GetOptions, Info, Proc, Range, Scope, Value};

const TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    match hello() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmix_hello: {e}");
            ExitCode::FAILURE
        }
    }
}

fn hello() -> Result<(), Error> {
    let client = Client::init()?;
    let me = client.rank();
    let size = client.job_size()?;
    let host = client.hostname().unwrap_or_else(|_| "?".into());
    let local_rank = client.local_rank()?;
    println!(
        "rank {me} of {size} on {host}: nspace {} local rank {local_rank}",
        client.nspace()
    );
    let root = Proc::new(client.nspace(), 0);
    let cred_key = "maestro.hello.credential";
    if me == 0 {
        client.put(
            Scope::Global,
            "maestro.hello",
            &Value::String(format!("hello from rank 0 of {size}")),
        )?;
        match client.get_credential(TIMEOUT) {
            Ok(c) => client.put(Scope::Global, cred_key, &Value::Bytes(c.bytes))?,
            Err(Error::NotSupported { .. }) => {
                client.put(Scope::Global, cred_key, &Value::Bytes(Vec::new()))?;
            }
            Err(e) => return Err(e),
        }
    }
    client.commit()?;
    client.fence(&[], true, TIMEOUT)?;
    let v = client.get(&root, "maestro.hello", GetOptions::default())?;
    println!(
        "rank {me}: got {:?} from rank 0",
        v.as_str().unwrap_or("<not a string>")
    );

    let pub_key = format!("maestro.hello.{}", client.nspace());
    let published = if me == 0 {
        client.publish(
            &[Info::new(&pub_key, Value::Uint32(size))],
            Range::Global,
            TIMEOUT,
        )
    } else {
        Ok(())
    };
    match published {
        Err(Error::NotSupported { .. }) => {
            println!("rank {me}: publish/lookup: not supported by this host")
        }
        Err(e) => return Err(e),
        Ok(()) if me == 0 => println!("rank {me}: publish/lookup: published {pub_key}"),
        Ok(()) => match client.lookup(&[&pub_key], Some(TIMEOUT)) {
            Ok(found) => {
                let value = found.first().and_then(|p| p.value.as_u64());
                println!("rank {me}: publish/lookup: ok ({pub_key} = {value:?})");
                if value != Some(u64::from(size)) {
                    return Err(Error::InvalidArgument(format!("lookup returned {found:?}")));
                }
            }
            Err(Error::NotSupported { .. }) => {
                println!("rank {me}: publish/lookup: not supported by this host")
            }
            Err(e) => return Err(e),
        },
    }

    if me == 1 || size == 1 {
        let cred = client.get(&root, cred_key, GetOptions::default())?;
        match cred.as_bytes() {
            Some([]) | None => println!("rank {me}: credential: not supported by this host"),
            Some(bytes) => {
                let who = client.validate_credential(bytes, TIMEOUT)?;
                let uid = pmix::find(&who, pmix::keys::USERID).and_then(Value::as_u64);
                println!("rank {me}: credential: validated (uid {uid:?})");
            }
        }
    }
    // Everyone leaves together so that rank 0's published key outlives the lookups.
    client.fence(&[], false, TIMEOUT)?;
    Ok(())
}
