//! Apps as the security and bounds tests run them: each a client of its own (as if
//! another process), raw protocol connections, an honest round trip that shows the PM
//! still serves.

use std::time::Duration;

use pool::attr::Attributes;
use pool::bootstrap::{ControlAddr, PmInfo};
use pool::proto;
use pool::{Client, JoinOptions};
use pool_tools::wire::Conn;

use super::{Group, tcp_addr};

/// How long a test's call may wait.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The PM's info, parsed.
pub fn info(text: &str) -> PmInfo {
    PmInfo::parse(text).expect("the PM's info parses")
}

/// A client of its own (as if another process) of `info`'s PM.
pub fn client(info: &PmInfo, component: &str) -> Client {
    Client::join(
        info,
        JoinOptions::new(component, 0)
            .timeout(LIMIT)
            .isolated()
            .fabric(fabric::Scope::SameNode)
            .expect("a shared-memory endpoint"),
    )
    .unwrap_or_else(|e| panic!("{component} joins: {e}"))
}

/// A raw protocol connection over TCP, joined as `component`.
pub fn raw(info: &PmInfo, component: &str) -> (Conn, proto::AppId) {
    let mut c = Conn::connect(&ControlAddr::Tcp(tcp_addr(info)), LIMIT).expect("connect");
    let app = c.join(info, component, 0).expect("join");
    (c, app)
}

/// Reads the PM's challenge on `conn` and makes the JOIN of `component` (index 0, no
/// fabric endpoint) that answers it, as `edit` changes it: for a test to send with what it
/// likes.
pub fn answer_challenge(
    conn: &mut Conn,
    info: &PmInfo,
    component: &str,
    edit: impl FnOnce(&mut proto::Join),
) -> proto::ToPm {
    let nonce = match conn.recv(proto::Op::Join).expect("challenge") {
        proto::FromPm::Challenge { nonce } => nonce,
        other => panic!("{other:?} instead of a challenge"),
    };
    let mut join = pool::bare_join(info, component, 0, &nonce);
    if let proto::ToPm::Join(j) = &mut join {
        edit(j);
    }
    join
}

/// A buffer holding `bytes`.
pub fn buffer(bytes: &[u8]) -> fabric::Buffer {
    let mut b = fabric::Buffer::new(bytes.len()).expect("buffer");
    b.as_mut_slice().copy_from_slice(bytes);
    b
}

/// An honest producer and consumer move one CDO through the PM and check its bytes.
pub fn honest_round_trip(info: &PmInfo, name: &str) {
    let p = client(info, "honest-producer");
    let c = client(info, "honest-consumer");
    let cdo = p.declare(name).expect("declare");
    p.seal_and_offer(cdo, Attributes::new(), buffer(b"honest bytes"))
        .expect("offer");
    let want = c.declare(name).expect("declare");
    let (data, _) = c.demand(want).expect("demand");
    assert_eq!(data.as_slice(), b"honest bytes");
    c.dispose(want).expect("dispose");
    p.withdraw(cdo).expect("withdraw");
}

/// True while the PM's process runs.
pub fn is_alive(pm: &Group) -> bool {
    super::alive(pm.pid())
}
