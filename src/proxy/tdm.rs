//! TDMRep on the way back: an origin's answer whose `tdm-reservation` header reserves
//! text-and-data-mining rights, to a request whose declared purposes a reservation binds
//! (`usage.tdm_purposes`), is withheld: the crawler gets `451` and an empty body, the
//! origin's body is read and dropped (the exchange was made at the origin), and
//! `X-Robots-Decision` names the source and the policy. In report mode the answer goes
//! through, marked. Only the header is read here: the file (`/.well-known/tdmrep.json`)
//! and HTML meta are resolved by `robots::tdmrep` but not enforced yet.

use pingora::http::ResponseHeader;
use pingora::Result;

use crate::config::UsageMode;
use crate::policy::answer::Outcome;
use crate::policy::usage::UsageVerdict;
use crate::robots::tdmrep::statement_of_headers;

/// What the reservation of `response` does to a request with `usage`: `None` when none
/// binds it; else the outcome and the `X-Robots-Decision` it gets.
pub(super) fn reservation(
    usage: Option<&UsageVerdict>,
    response: &ResponseHeader,
) -> Option<(Outcome, String)> {
    let mode = usage?.tdm()?;
    let statement = statement_of_headers(&response.headers).filter(|s| s.reserved)?;
    let policy = statement
        .policy
        .as_deref()
        .map(|p| format!("; policy=\"{}\"", header_safe(p)))
        .unwrap_or_default();
    Some(match mode {
        UsageMode::Report => (
            Outcome::WouldTdmWithhold,
            format!("would-tdm-withhold; source=header; tdm-reservation=1{policy}"),
        ),
        _ => (
            Outcome::TdmWithheld,
            format!("tdm-reserved; source=header; tdm-reservation=1{policy}"),
        ),
    })
}

/// A policy URL as a quoted header parameter: printable ASCII kept; a quote, a backslash, spaces,
/// controls and any other octet percent-encoded.
fn header_safe(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for &b in url.as_bytes() {
        match b {
            b'"' | b'\\' => out.push_str(&format!("%{b:02X}")),
            0x21..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The answer the crawler gets instead of a withheld one: `451`, the decision, no body.
pub(super) fn withheld(response: &ResponseHeader, decision: &str) -> Result<ResponseHeader> {
    let mut answer = ResponseHeader::build(451, Some(3))?;
    answer.set_version(response.version);
    answer.insert_header("X-Robots-Decision", decision)?;
    answer.insert_header("Content-Length", "0")?;
    answer.insert_header("Cache-Control", "no-store")?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever octets an origin's policy holds, the decision is a valid header value.
    #[test]
    fn any_policy_makes_a_header_value() {
        for policy in [
            "https://p.example/a?b=1",
            "https://p.example/é \"x\"\\",
            "a\u{7f}\u{1}",
        ] {
            let safe = header_safe(policy);
            assert!(http::HeaderValue::from_str(&safe).is_ok(), "{safe}");
            assert!(!safe.contains('"') && !safe.contains(' '), "{safe}");
        }
        assert_eq!(
            header_safe("https://p.example/é"),
            "https://p.example/%C3%A9"
        );
    }
}
