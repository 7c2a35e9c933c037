//! Operator overrides per host (`pacing.overrides`): a longer delay, another in-flight
//! limit, or a block, for a host name or a `*.domain` pattern.
//!
//! Matching: an exact name wins; otherwise the longest `*.domain` pattern whose domain
//! is the host or one of its parents (`*.example.com` matches `example.com` and
//! `a.b.example.com`). Names compare lower-case, without a trailing dot. A lookup walks
//! the host's parent domains: one hash lookup per label, no allocation (the parents are
//! slices of the host); none at all when no override is configured.

use std::collections::HashMap;

use crate::config::PacingOverride;
use crate::policy::target::Origin;

/// The overrides, indexed for lookup by host name.
#[derive(Debug, Default)]
pub struct Overrides {
    /// Overrides for one host name exactly.
    exact: HashMap<String, PacingOverride>,
    /// Overrides for a domain and its subdomains (`*.example.com`), by domain.
    domains: HashMap<String, PacingOverride>,
}

/// The override that applies to one host, and the pattern it came from.
#[derive(Clone, Copy, Debug)]
pub struct Applied<'a> {
    /// The entry as configured (`host` is the pattern).
    pub entry: &'a PacingOverride,
}

impl Overrides {
    /// Indexes `entries`; a later entry for the same pattern replaces an earlier one.
    pub fn new(entries: &[PacingOverride]) -> Overrides {
        let mut overrides = Overrides::default();
        for entry in entries {
            let host = entry.host.trim_end_matches('.').to_ascii_lowercase();
            match host.strip_prefix("*.") {
                Some(domain) => overrides.domains.insert(domain.to_string(), entry.clone()),
                None => overrides.exact.insert(host, entry.clone()),
            };
        }
        overrides
    }

    /// The override for `origin`'s host, if any (nothing is formatted when no override
    /// is configured).
    pub fn find(&self, origin: &Origin) -> Option<Applied<'_>> {
        if self.exact.is_empty() && self.domains.is_empty() {
            return None;
        }
        match origin.name() {
            Some(name) => self.find_host(name),
            None => self.find_host(&origin.host_name()),
        }
    }

    /// The override for `host` (a canonical host name or IP literal), if any.
    fn find_host(&self, host: &str) -> Option<Applied<'_>> {
        if let Some(entry) = self.exact.get(host) {
            return Some(Applied { entry });
        }
        let mut rest = host;
        loop {
            if let Some(entry) = self.domains.get(rest) {
                return Some(Applied { entry });
            }
            rest = rest.split_once('.')?.1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(host: &str, delay: f64) -> PacingOverride {
        PacingOverride {
            host: host.into(),
            delay_seconds: Some(crate::config::Seconds::new(delay)),
            max_in_flight: None,
            block: false,
            reason: None,
        }
    }

    #[test]
    fn exact_names_then_longest_domain() {
        let o = Overrides::new(&[
            entry("*.example.com", 1.0),
            entry("*.deep.example.com", 2.0),
            entry("www.example.com", 3.0),
            entry("Other.ORG.", 4.0),
        ]);
        let delay = |h: &str| {
            o.find_host(h)
                .and_then(|a| a.entry.delay_seconds)
                .map(|s| s.get())
        };
        assert_eq!(delay("www.example.com"), Some(3.0));
        assert_eq!(delay("example.com"), Some(1.0));
        assert_eq!(delay("a.example.com"), Some(1.0));
        assert_eq!(delay("x.deep.example.com"), Some(2.0));
        assert_eq!(delay("deep.example.com"), Some(2.0));
        assert_eq!(delay("other.org"), Some(4.0));
        assert_eq!(delay("notexample.com"), None);
        assert_eq!(delay("example.org"), None);
        assert_eq!(delay("com"), None);
    }
}
