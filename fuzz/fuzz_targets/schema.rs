//! The schema loader on any YAML text: loads or says what is wrong, never panics; values
//! parsed against what loaded are checked the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pool::schema::Schemas;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut schemas = Schemas::builtin();
    if schemas.load_str(&text, "fuzz").is_ok() {
        // Every key the text may have declared (relative to any namespace it named), with
        // a value made of the same bytes.
        let namespaces: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("schema-namespace:"))
            .map(str::trim)
            .chain([""])
            .collect();
        for key in text.lines().filter_map(|l| l.trim().strip_prefix("- key:")) {
            for ns in &namespaces {
                let _ = schemas.parse_value(&format!("{ns}{}", key.trim()), &text);
            }
        }
    }
});
