//! Any octets as a `/.well-known/tdmrep.json` (`TdmFile::parse`, then a lookup of a path
//! cut from the same octets) and as an HTML page (`statement_of_html`): nothing panics,
//! a rule found is one of the file's, and a policy comes only with a reservation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robotsgate::robots::tdmrep::{statement_of_html, TdmFile};
use robotsgate::robots::CanonicalPath;

fuzz_target!(|data: &[u8]| {
    let file = TdmFile::parse(data);
    let text = String::from_utf8_lossy(&data[..data.len().min(64)]);
    let path = format!("/{}", text.trim_start_matches('/'));
    if let Some((index, statement)) = file.lookup(&CanonicalPath::new(&path)) {
        assert!(index < file.len(), "{index} of {}", file.len());
        if let Some(statement) = statement {
            assert!(statement.reserved || statement.policy.is_none());
        }
    }
    if let Some(statement) = statement_of_html(data) {
        assert!(statement.reserved || statement.policy.is_none());
    }
});
