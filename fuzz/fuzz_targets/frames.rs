//! The frame decoder, as the pool manager and the clients run it on bytes from a socket:
//! any input either decodes or is refused, never panics; what decodes re-encodes to bytes
//! that decode to the same encoding; selectors received in SUBSCRIBE compile or are
//! refused; a first frame decodes as a lone JOIN or is refused. Deep and wide selectors
//! (20,000 nested nots, an `and` announcing 2^32 operands) are in the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pool::proto::{self, FromPm, ToPm};
use pool::selector::Selector;

fn roundtrip<T: serde::Serialize + serde::de::DeserializeOwned>(msgs: &[T]) {
    let Ok(bytes) = proto::encode(msgs) else {
        return;
    };
    let again: Vec<T> = proto::decode(&bytes[proto::HEADER..]).expect("our own frame decodes");
    assert_eq!(
        proto::encode(&again).expect("re-encodes"),
        bytes,
        "a decoded batch did not re-encode to the same bytes"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut buf = data.to_vec();
    let mut msgs = Vec::new();
    if proto::drain_frames::<ToPm>(&mut buf, |m| msgs.push(m)).is_ok() {
        for m in &msgs {
            if let ToPm::Subscribe { selector, .. } = m {
                let _ = Selector::compile((**selector).clone());
            }
        }
        roundtrip(&msgs);
    }
    let mut buf = data.to_vec();
    let mut msgs = Vec::new();
    if proto::drain_frames::<FromPm>(&mut buf, |m| msgs.push(m)).is_ok() {
        roundtrip(&msgs);
    }
    // Payloads without a header, as decode sees them, and as an unjoined connection's
    // first frame.
    if let Ok(msgs) = proto::decode::<ToPm>(data) {
        roundtrip(&msgs);
    }
    if let Ok(join) = proto::decode_join(data) {
        roundtrip(&[ToPm::Join(join)]);
    }
});
