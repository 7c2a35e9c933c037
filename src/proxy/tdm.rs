//! TDMRep on the way back: an origin's answer whose `tdm-reservation` header reserves
//! text-and-data-mining rights, to a request whose declared purposes a reservation binds
//! (`usage.tdm_purposes`), is withheld: the crawler gets `451` and an empty body, the
//! origin's body is read and dropped (the exchange was made at the origin), and
//! `X-Robots-Decision` names the source and the policy. In report mode the answer goes
//! through, marked. Only the header is read here: the file (`/.well-known/tdmrep.json`)
//! is judged before the request is sent (`enforce::tdm`), and HTML meta is resolved by
//! `robots::tdmrep` but not enforced.

use pingora::http::ResponseHeader;
use pingora::Result;

use crate::config::UsageMode;
use crate::policy::answer::{param_safe, Outcome};
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
        .map(|p| format!("; policy=\"{}\"", param_safe(p)))
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

/// The answer the crawler gets instead of a withheld one: `451`, the decision, no body.
pub(super) fn withheld(response: &ResponseHeader, decision: &str) -> Result<ResponseHeader> {
    let mut answer = ResponseHeader::build(451, Some(3))?;
    answer.set_version(response.version);
    answer.insert_header("X-Robots-Decision", decision)?;
    answer.insert_header("Content-Length", "0")?;
    answer.insert_header("Cache-Control", "no-store")?;
    Ok(answer)
}
