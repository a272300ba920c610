//! A real pool manager on loopback, a producer and a consumer joining it with the workflow
//! secret, CDOs of mixed sizes moved over the fabric layer and checked byte for byte; a
//! wrong secret and a connection sending garbage do not disturb them.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use fabric::{Buffer, Config, Endpoint, Scope, discover, select};
use pool::attr::{AttrValue, Attributes};
use pool::proto::Refusal;
use pool::{Client, ClientError, PoolManager};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const T: Duration = Duration::from_secs(30);

fn endpoint() -> Endpoint {
    let cfg = Config {
        provider: Some("tcp;ofi_rxm".into()),
        iface: Some("lo".into()),
        ..Config::default()
    };
    let offer = select(&discover().expect("fi_getinfo"), &cfg, Scope::AnyNode, None)
        .expect("tcp on lo")
        .remove(0);
    Endpoint::open(&offer).expect("endpoint")
}

fn join(pm: SocketAddr, component: &str, secret: &[u8]) -> pool::Result<Client> {
    Client::join(pm, "wf", component, 0, secret, endpoint(), T)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(17).wrapping_add(seed))
        .collect()
}

const SIZES: [usize; 5] = [0, 1, 4096, 1 << 20, 8 << 20];

#[test]
fn producer_and_consumer_move_cdos_intact() {
    let pm = PoolManager::start("wf", SECRET, "127.0.0.1:0".parse().expect("addr")).expect("pm");
    let addr = pm.addr();

    // Intruders: a wrong secret is refused; garbage closes only that connection.
    match join(addr, "intruder", b"wrong") {
        Err(ClientError::Refused {
            why: Refusal::BadProof,
            ..
        }) => {}
        other => panic!("wrong secret: {:?}", other.map(|c| c.app())),
    }
    let mut garbage = TcpStream::connect(addr).expect("connect");
    garbage
        .write_all(b"GET / HTTP/1.1\r\n\r\nthis is not a frame")
        .expect("write");

    let consumer = std::thread::spawn(move || -> pool::Result<()> {
        let mut c = join(addr, "consumer", SECRET)?;
        for (i, &len) in SIZES.iter().enumerate() {
            let cdo = c.declare(&format!("field-{i}"))?;
            if i % 2 == 0 {
                c.require(cdo)?;
            }
            let (bytes, attrs) = c.demand(cdo)?;
            assert_eq!(bytes.len(), len, "CDO {i}");
            assert!(bytes == data(len, i as u8), "CDO {i} corrupted");
            assert_eq!(attrs.get(".user.step"), Some(&AttrValue::Int(i as i64)));
            c.dispose(cdo)?;
        }
        c.leave()
    });

    let mut p = join(addr, "producer", SECRET).expect_ok();
    let mut offered = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let cdo = p.declare(&format!("field-{i}")).expect("declare");
        let mut attrs = Attributes::new();
        attrs.insert(".user.step".into(), AttrValue::Int(i as i64));
        p.seal(cdo, attrs).expect("seal");
        p.offer(
            cdo,
            Buffer::from_slice(&data(len, i as u8)).expect("buffer"),
        )
        .expect("offer");
        offered.push(cdo);
    }
    consumer.join().expect("consumer thread").expect("consumer");
    for cdo in offered {
        let buf = p.withdraw(cdo).expect("withdraw");
        assert!(buf.len() <= 8 << 20);
        p.dispose(cdo).expect("dispose");
    }
    p.leave().expect("leave");
    drop(garbage);
    pm.stop();
}

trait ExpectOk<T> {
    fn expect_ok(self) -> T;
}

impl<T> ExpectOk<T> for pool::Result<T> {
    fn expect_ok(self) -> T {
        self.unwrap_or_else(|e| panic!("{e}"))
    }
}
