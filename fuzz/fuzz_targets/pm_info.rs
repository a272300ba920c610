//! The PM info parser (`MSTRO_POOL_MANAGER_INFO`, PMIx lookups) on any text: parses or is
//! refused, never panics; what parses re-encodes to text that parses to the same info.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pool::bootstrap::PmInfo;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(info) = PmInfo::parse(&text) {
        let again = PmInfo::parse(&info.encode()).expect("an encoded PM info parses");
        assert_eq!(again, info, "PM info changed in a round trip");
    }
});
